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
#: Most virtual time one call into the loop may skip: a delivery that waits longer never ends (its heartbeats alone
#: would move the clock on forever).
MAX_JUMP_S = 30 * 86400.0
#: Most jumps one call into the loop may make (a 16-hour wait at the default 3 s heartbeat; the longest a run may
#: last by default, `max_deadline_s`, is 4 hours).
MAX_JUMPS = 20_000


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
        self.since_reset_s = 0.0
        self.jumps_since_reset = 0

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
        if self.since_reset_s + timeout > MAX_JUMP_S or self.jumps_since_reset >= MAX_JUMPS:
            raise FleetStalled(
                f"a delivery waited {self.since_reset_s / 3600:.0f} hours of virtual time in {self.jumps_since_reset} "
                "timer jumps and still does not end"
            )
        self.jumps_since_reset += 1
        self.clock.advance(timeout)
        self.jumped_s += timeout
        self.since_reset_s += timeout
        return []


def virtual_loop(clock: VirtualClock, io_grace_s: float = 0.0) -> asyncio.AbstractEventLoop:
    """A new event loop on `clock` whose executors (the default and the engine's Redis one) run calls inline."""
    loop = asyncio.SelectorEventLoop(_VirtualSelector(clock, io_grace_s))
    inline = InlineExecutor()
    loop.set_default_executor(inline)
    _redis_executors[loop] = inline
    return loop


def jumped_s(loop: asyncio.AbstractEventLoop, reset: bool = False) -> float:
    """Virtual seconds the loop skipped so far; `reset`: start counting towards MAX_JUMP_S again."""
    selector = getattr(loop, "_selector", None)
    if not isinstance(selector, _VirtualSelector):
        return 0.0
    if reset:
        selector.since_reset_s = 0.0
        selector.jumps_since_reset = 0
    return selector.jumped_s
