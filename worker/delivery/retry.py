"""Transient retries: exponential backoff with full jitter (tenacity's waits), bounded by the job's max attempts.

The handler's attempt loop runs one attempt per pass and gets a `Step`; `AttemptLoop` says what follows it, and the
handler acts on that itself (no call back into it from here). A `retry` step backs off (full jitter, exponent =
counted attempts so far) and runs again; a `reroute` step (rate limit, auth failure: another account) runs again at
once, never through exponential backoff; a `wait` step (the only eligible accounts cool down for a moment) sleeps until
the cooldown ends (`wait_rate_limit`), not a blind exponential. A wait longer than `retry_in_place_max_s` is not waited
in place: `pause` raises `DeferInstead` and the handler defers the job. Every wait happens with the account slot
released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tenacity import RetryCallState, wait_random_exponential
from tenacity.wait import wait_base

from ...config.settings import Settings
from .state import Finish
from .waits import Cooldown, wait_rate_limit

StepKind = Literal["done", "retry", "reroute", "wait"]


@dataclass(frozen=True)
class Step:
    """How one pass of the attempt loop ended."""

    kind: StepKind
    status: Finish | None = None  # done: how the delivery ended
    reason: str = ""  # retry: transient | timeout; wait: rate_limit (the retries_total label)
    cooldown: Cooldown | None = None  # wait: the cooldown to sit out before the next pass

    @staticmethod
    def finished(status: Finish) -> Step:
        """A `done` step."""
        return Step("done", status)

    @property
    def done(self) -> Finish:
        """The status a `done` step ended with."""
        assert self.status is not None, f"a {self.kind} step has no final status"
        return self.status


class DeferInstead(Exception):
    """The backoff is too long to wait in place: defer the job for `wait_s` instead."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        super().__init__(f"defer for {wait_s:.2f} s")


@dataclass
class _Shim:
    """The part of tenacity's RetryCallState that wait_random_exponential reads."""

    attempt_number: int


class JobBackoff(wait_base):
    """Full-jitter exponential backoff whose exponent is the job's counted attempts, not this delivery's passes."""

    def __init__(self, settings: Settings, counted: Callable[[], int]) -> None:
        self._wait = wait_random_exponential(multiplier=settings.retry_base_s, max=settings.retry_max_s)
        self._counted = counted

    def __call__(self, state: RetryCallState) -> float:
        step = state.outcome.result() if state.outcome is not None and not state.outcome.failed else None
        if not isinstance(step, Step) or step.kind != "retry":
            return 0.0  # reroutes go at once (rate limits never back off exponentially)
        return self.compute(max(1, self._counted()))

    def compute(self, attempt_number: int) -> float:
        """One jittered wait for the given (1-based) counted attempt."""
        return float(self._wait(_Shim(attempt_number)))  # type: ignore[arg-type]


def _cooldown(state: RetryCallState) -> Cooldown | None:
    """The cooldown a `wait` step asks to sit out (wait_rate_limit's `extract`)."""
    if state.outcome is None or state.outcome.failed:
        return None
    step = state.outcome.result()
    return step.cooldown if isinstance(step, Step) and step.kind == "wait" else None


def _outcome(step: Step) -> RetryCallState:
    """A pass's step as tenacity's waits read an attempt's outcome."""
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.set_result(step)
    return state


class AttemptLoop:
    """What follows each pass of one delivery's attempt loop: the wait before the next pass, or the end."""

    def __init__(self, settings: Settings, *, counted: Callable[[], int], max_passes: int) -> None:
        """`counted()` gives the job's counted attempts so far (the policy turns the last allowed one into a failure);
        `max_passes` bounds the passes of this delivery (a safety net against endless reroutes)."""
        self.settings = settings
        self.max_passes = max_passes
        self.passes = 0
        self._wait = wait_rate_limit(JobBackoff(settings, counted), extract=_cooldown)

    def next_wait(self, step: Step) -> float | None:
        """After a pass that ended with `step`: seconds to wait before the next pass, or None when the loop ends
        (`step` is done, or it was the last pass allowed: the caller ends with it)."""
        self.passes += 1
        if step.kind == "done" or self.passes >= self.max_passes:
            return None
        return float(self._wait(_outcome(step)))

    def in_place(self, wait_s: float) -> bool:
        """Whether a wait of `wait_s` is sat out in place (else `pause` defers the job instead)."""
        return wait_s <= self.settings.retry_in_place_max_s

    async def pause(self, wait_s: float, interrupt: asyncio.Event) -> None:
        """Sit out `wait_s` before the next pass; `interrupt` cuts it short (cancel, shutdown, lost lease: the next
        pass sees why). Raises DeferInstead when the wait is too long to sit out in place."""
        if wait_s <= 0:
            return
        if not self.in_place(wait_s):
            raise DeferInstead(wait_s)
        try:
            await asyncio.wait_for(interrupt.wait(), timeout=wait_s)
        except TimeoutError:
            pass
