"""Stall timers of one run: first byte, idle (suspended while a tool runs) and the hard deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from claudeq.models import JobSpec

from ...config.settings import Settings
from .outcome import StopReason


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed: to the first streamed byte, between progress marks, and for the whole attempt."""

    first_byte_s: float
    idle_s: float
    deadline_s: float

    @classmethod
    def for_job(cls, spec: JobSpec, settings: Settings) -> Timeouts:
        """The job's own timeouts, else the settings' defaults; the deadline capped at `max_deadline_s`."""
        return cls(
            first_byte_s=spec.first_byte_timeout_s or settings.first_byte_timeout_s,
            idle_s=spec.idle_timeout_s or settings.idle_timeout_s,
            deadline_s=min(spec.deadline_s or settings.deadline_s, settings.max_deadline_s),
        )


@dataclass
class Watchdog:
    """Decides, from progress marks, whether a run has stalled and how long it may wait before asking again.

    Before the first byte only the first-byte timer (and the deadline) runs, counted from the moment the CLI has the
    prompt (`prompt_sent`): the CLI's own start, slow on a loaded host, is not the model's time to first byte (a CLI
    that never comes up fails its start within the SDK's initialize timeout, docs/cli-behaviour.md). After the first
    byte, the idle timer measures time since the last progress mark, except while a tool call is in flight (a
    long tool is not a stalled model).
    """

    timeouts: Timeouts
    clock: Callable[[], float] = time.monotonic
    started_at: float = field(default=-1.0)
    first_byte_at: float | None = None
    last_progress: float | None = None
    #: When the CLI had the prompt: the first-byte timer counts from here (None: still starting).
    waiting_since: float | None = None
    _tool_since: float | None = None

    def __post_init__(self) -> None:
        if self.started_at < 0:
            self.started_at = self.clock()

    def prompt_sent(self, *, at: float | None = None) -> None:
        """The CLI is up and has the prompt: the first-byte timer starts."""
        self.waiting_since = self.clock() if at is None else at

    @property
    def tool_in_flight(self) -> bool:
        """Whether the idle timer is suspended for a running tool."""
        return self._tool_since is not None

    def mark(self, *, at: float | None = None, first_byte: bool = False) -> None:
        """Record progress (any message from the CLI); `first_byte` when it was model output."""
        now = self.clock() if at is None else at
        self.last_progress = now
        if first_byte and self.first_byte_at is None:
            self.first_byte_at = now

    def tool_running(self, running: bool, *, at: float | None = None) -> None:
        """Tell the watchdog whether a tool call is in flight now."""
        now = self.clock() if at is None else at
        if running and self._tool_since is None:
            self._tool_since = now
        elif not running and self._tool_since is not None:
            self._tool_since = None
            self.last_progress = max(self.last_progress or now, now)  # idle restarts when the tool returns

    def check(self, now: float | None = None) -> tuple[StopReason | None, float]:
        """(why the run must stop now, or None; seconds until the next timer could fire)."""
        now = self.clock() if now is None else now
        deadline_left = self.started_at + self.timeouts.deadline_s - now
        if deadline_left <= 0:
            return "deadline", 0.0
        if self.first_byte_at is None:
            if self.waiting_since is None:
                return None, deadline_left  # the CLI is starting
            first_left = self.waiting_since + self.timeouts.first_byte_s - now
            if first_left <= 0:
                return "first_byte", 0.0
            return None, min(deadline_left, first_left)
        if self._tool_since is not None:
            return None, deadline_left
        since = self.last_progress if self.last_progress is not None else self.first_byte_at
        idle_left = since + self.timeouts.idle_s - now
        if idle_left <= 0:
            return "idle", 0.0
        return None, min(deadline_left, idle_left)
