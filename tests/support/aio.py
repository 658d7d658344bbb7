"""Running the worker's coroutine methods from a sync test."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one of the worker's coroutines (a store's or the account manager's) to its answer, on a loop of its own.
    Without an async client attached (`use_async`), its Redis calls go on the sync client in a thread."""
    return asyncio.run(coro)
