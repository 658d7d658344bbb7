"""Transient retries through tenacity: exponential backoff with full jitter, bounded by the job's max attempts.

The engine's attempt loop is one tenacity `AsyncRetrying`: each pass runs one attempt and returns a `Step`. A
`retry` step backs off (full jitter, exponent = counted attempts so far) and runs again; a `reroute` step (rate limit,
auth failure: another account) runs again at once, never through exponential backoff; a `wait` step (the only
eligible accounts cool down for a moment) sleeps until the cooldown ends (`wait_rate_limit`), not a blind
exponential. A wait longer than `retry_in_place_max_s` is not waited in place: the sleep raises `DeferInstead` and the
engine defers the job. Every wait happens with the account slot released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt, wait_random_exponential
from tenacity.wait import wait_base

from claudeq.config.settings import Settings
from claudeq.worker.delivery.state import Finish
from claudeq.worker.delivery.waits import Cooldown, wait_rate_limit

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


OnRetry = Callable[[Step, float, bool], Awaitable[None]]


def _cooldown(state: RetryCallState) -> Cooldown | None:
    """The cooldown a `wait` step asks to sit out (wait_rate_limit's `extract`)."""
    if state.outcome is None or state.outcome.failed:
        return None
    step = state.outcome.result()
    return step.cooldown if isinstance(step, Step) and step.kind == "wait" else None


async def run_attempts(
    step: Callable[[], Awaitable[Step]],
    settings: Settings,
    *,
    counted: Callable[[], int],
    max_passes: int,
    on_retry: OnRetry,
    interrupt: asyncio.Event,
) -> Step:
    """Run `step` until it is done; back off between transient failures. Raises DeferInstead for long waits.

    `counted()` gives the job's counted attempts so far (the policy turns the last allowed one into a failure);
    `max_passes` bounds the passes of this delivery (a safety net against endless reroutes); `on_retry(step, wait_s,
    in_place)` runs before each backoff (the retry event and metric); `interrupt` cuts a wait in place short
    (cancel, shutdown, lost lease: the next pass sees why).
    """
    first = await step()
    if first.kind == "done":
        return first  # most deliveries: one pass, no retry loop to build
    replayed = [first]

    async def again() -> Step:
        """The first pass's result, then `step` for each pass after it: the retry loop sees every pass."""
        return replayed.pop() if replayed else await step()

    backoff = wait_rate_limit(JobBackoff(settings, counted), extract=_cooldown)

    async def before_sleep(state: RetryCallState) -> None:
        last = state.outcome.result() if state.outcome is not None else None
        wait_s = state.upcoming_sleep
        if isinstance(last, Step) and last.kind in ("retry", "wait"):
            await on_retry(last, wait_s, wait_s <= settings.retry_in_place_max_s)

    async def sleep(seconds: float) -> None:
        if seconds <= 0:
            return
        if seconds > settings.retry_in_place_max_s:
            raise DeferInstead(seconds)
        try:
            await asyncio.wait_for(interrupt.wait(), timeout=seconds)
        except TimeoutError:
            pass

    def give_up(state: RetryCallState) -> Step:
        assert state.outcome is not None
        result: Step = state.outcome.result()
        return result

    retrying = AsyncRetrying(
        retry=retry_if_result(lambda s: isinstance(s, Step) and s.kind != "done"),
        wait=backoff,
        stop=stop_after_attempt(max_passes),
        before_sleep=before_sleep,
        sleep=sleep,
        retry_error_callback=give_up,
        reraise=True,
    )
    result: Step = await retrying(again)
    return result
