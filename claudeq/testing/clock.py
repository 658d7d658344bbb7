"""The kit's clock: virtual time that moves on only when something would wait (docs/testing.md#time).

While a fleet is open, `time.time`, `time.monotonic` (and their `_ns` forms) and claudeq's `utcnow` read this clock:
the real clock plus an offset that only grows. The in-process worker's event loop never sleeps: when nothing is
ready and a timer is due later, the offset jumps to it (a retry's backoff, a cooldown waited out in place, a
watchdog's timeout). `Fleet.advance` moves it on by hand (a deferred job's ready time, a rate-limit window's reset).
Redis (fakeredis) reads `time.time` too, so key expiry and `TIME` follow the same clock; a real Redis server keeps
its own (docs/testing.md#against-a-real-redis).
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import claudeq.models

_REAL_TIME = time.time
_REAL_TIME_NS = time.time_ns
_REAL_MONOTONIC = time.monotonic
_REAL_MONOTONIC_NS = time.monotonic_ns
_REAL_UTCNOW = claudeq.models.utcnow


class VirtualClock:
    """The real clock plus an offset that only grows (so time stays monotonic for everything that reads it)."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    @property
    def offset(self) -> float:
        """Seconds this clock is ahead of the real one."""
        return self._offset

    def time(self) -> float:
        """Epoch seconds (`time.time` while installed)."""
        return _REAL_TIME() + self._offset

    def time_ns(self) -> int:
        """Epoch nanoseconds (`time.time_ns` while installed)."""
        return _REAL_TIME_NS() + int(self._offset * 1e9)

    def monotonic(self) -> float:
        """Monotonic seconds (`time.monotonic` while installed: asyncio's loops read it too)."""
        return _REAL_MONOTONIC() + self._offset

    def monotonic_ns(self) -> int:
        """Monotonic nanoseconds (`time.monotonic_ns` while installed)."""
        return _REAL_MONOTONIC_NS() + int(self._offset * 1e9)

    def utcnow(self) -> datetime:
        """The current time, timezone-aware UTC (claudeq's `utcnow` while installed)."""
        return datetime.fromtimestamp(self.time(), UTC)

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds` (never back)."""
        if seconds > 0:
            with self._lock:
                self._offset += seconds


_installed: list[VirtualClock] = []
_saved: list[tuple[Any, str, Any]] = []
_install_lock = threading.Lock()


_holders: tuple[int, list[Any]] = (-1, [])


def _holders_of_utcnow() -> list[Any]:
    """claudeq's (and its tests') modules holding the real `utcnow`; looked for again only when modules were added."""
    global _holders
    count = len(sys.modules)
    if _holders[0] != count:
        found = [
            module
            for name, module in list(sys.modules.items())
            if (name == "claudeq" or name.startswith(("claudeq.", "tests.")))
            and getattr(module, "utcnow", None) is _REAL_UTCNOW
        ]
        _holders = (count, found)
    return _holders[1]


def shared_clock() -> VirtualClock:
    """The clock every open fleet shares (one process has one `time.time`)."""
    with _install_lock:
        return _installed[0] if _installed else VirtualClock()


def install(clock: VirtualClock) -> None:
    """Make `time.time`, `time.monotonic` and claudeq's `utcnow` read `clock` until `uninstall` (nested installs of
    the same clock are counted)."""
    with _install_lock:
        if _installed:
            if _installed[0] is not clock:
                raise RuntimeError("another fleet's clock is installed: open fleets share one (shared_clock())")
            _installed.append(clock)
            return
        _installed.append(clock)
        patches: list[tuple[Any, str, Any]] = [
            (time, "time", clock.time),
            (time, "time_ns", clock.time_ns),
            (time, "monotonic", clock.monotonic),
            (time, "monotonic_ns", clock.monotonic_ns),
        ]
        # Modules that imported `utcnow` by name hold the original: each gets the clock's.
        patches += [(module, "utcnow", clock.utcnow) for module in _holders_of_utcnow()]
        for target, attr, value in patches:
            _saved.append((target, attr, getattr(target, attr)))
            setattr(target, attr, value)


def uninstall(clock: VirtualClock) -> None:
    """Undo one `install` of `clock`; the last one restores the real clock."""
    with _install_lock:
        if not _installed or _installed[-1] is not clock:
            return
        _installed.pop()
        if _installed:
            return
        while _saved:
            target, attr, value = _saved.pop()
            setattr(target, attr, value)
