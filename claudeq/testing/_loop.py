"""The in-process worker's event loop: no threads, no real sleeping (docs/testing.md#time).

Every call the engine would make in a thread (`in_redis_thread`, `asyncio.to_thread`) runs inline on the loop, so a
delivery is one thread of control. When the loop has nothing ready and only timers left, the virtual clock jumps to
the next one instead of sleeping.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
from collections.abc import Callable
from typing import Any, TypeVar

from claudeq.testing.clock import VirtualClock
from claudeq.worker.loop_host import _redis_executors

T = TypeVar("T")

#: Longest real wait for I/O the loop allows itself when no timer is due (a stuck delivery fails the test instead).
STALL_S = 30.0


class FleetStalled(RuntimeError):
    """The in-process worker waited for something that nothing will ever do."""


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted call at once, on the calling thread (a ThreadPoolExecutor only for asyncio's type check)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class _VirtualSelector(selectors.DefaultSelector):
    """Waits no real time for timers: when nothing is ready, the clock jumps to the next one.

    `io_grace_s`: with a real Redis a reply may still be on its way; wait that long for I/O before jumping."""

    def __init__(self, clock: VirtualClock, io_grace_s: float) -> None:
        super().__init__()
        self.clock = clock
        self.io_grace_s = io_grace_s
        self.jumped_s = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if self.io_grace_s > 0 and len(self.get_map()) > 1:  # sockets besides the loop's own wake-up pipe
            ready = super().select(self.io_grace_s if timeout is None else min(timeout, self.io_grace_s))
            if ready:
                return ready
        if timeout is None:
            ready = super().select(STALL_S)
            if not ready:
                raise FleetStalled(f"the in-process worker waited {STALL_S:g} s for something nothing will do")
            return ready
        self.clock.advance(timeout)
        self.jumped_s += timeout
        return []


def virtual_loop(clock: VirtualClock, io_grace_s: float = 0.0) -> asyncio.AbstractEventLoop:
    """A new event loop on `clock` whose executors (the default and the engine's Redis one) run calls inline."""
    loop = asyncio.SelectorEventLoop(_VirtualSelector(clock, io_grace_s))
    inline = InlineExecutor()
    loop.set_default_executor(inline)
    _redis_executors[loop] = inline
    return loop


def jumped_s(loop: asyncio.AbstractEventLoop) -> float:
    """Virtual seconds the loop skipped so far."""
    selector = getattr(loop, "_selector", None)
    return selector.jumped_s if isinstance(selector, _VirtualSelector) else 0.0
