"""Running the worker's coroutine methods from a sync test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one of the worker's coroutines (a store's or the account manager's) to its answer, on a loop of its own.
    Without an async client attached (`use_async`), its Redis calls go on the sync client in a thread."""
    return asyncio.run(coro)


async def eventually(check: Callable[[], T], want: T, within_s: float = 10.0) -> T:
    """`check()` once it returns `want`, polled on the running loop; its last answer after `within_s` (for the
    caller's assert to show). A bound, not a timing: a loaded machine may take longer than a sleep's guess."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        got = check()
        if got == want or asyncio.get_running_loop().time() > deadline:
            return got
        await asyncio.sleep(0.01)
