"""wait_rate_limit: a retry after a rejection waits for the cooldown's reset, anything else falls back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt, wait_fixed

from claudeq.worker.delivery.waits import Cooldown, wait_rate_limit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
FAILED = "failed"  # an attempt that ended some other way (a transient error, say)


def cooldown_of(state: RetryCallState) -> Cooldown | None:
    """The Cooldown the last attempt returned, if it did."""
    if state.outcome is None or state.outcome.failed:
        return None
    result = state.outcome.result()
    return result if isinstance(result, Cooldown) else None


def run(results: list[Cooldown | str], wait: wait_rate_limit) -> list[float]:
    """Drive a real tenacity loop whose attempts return `results` in turn, then "ok"; return the sleeps it asked."""
    sleeps: list[float] = []
    pending = list(results)

    def attempt() -> Cooldown | str:
        return pending.pop(0) if pending else "ok"

    retrying = Retrying(
        wait=wait,
        stop=stop_after_attempt(len(results) + 1),
        sleep=sleeps.append,
        retry=retry_if_result(lambda r: r != "ok"),
    )
    assert retrying(attempt) == "ok"
    return sleeps


def test_waits_until_the_reset_plus_jitter() -> None:
    wait = wait_rate_limit(wait_fixed(99), jitter_s=0.5, clock=lambda: NOW, rng=random.Random(1), extract=cooldown_of)
    sleeps = run([Cooldown(NOW + timedelta(seconds=3))], wait)
    assert len(sleeps) == 1
    assert 3.0 <= sleeps[0] <= 3.5


def test_a_reset_in_the_past_retries_at_once() -> None:
    wait = wait_rate_limit(wait_fixed(99), jitter_s=0, clock=lambda: NOW, extract=cooldown_of)
    assert run([Cooldown(NOW - timedelta(seconds=3))], wait) == [0.0]


def test_other_outcomes_and_unknown_resets_use_the_fallback() -> None:
    wait = wait_rate_limit(wait_fixed(7), clock=lambda: NOW, extract=cooldown_of)
    sleeps = run([FAILED, Cooldown(None)], wait)
    assert sleeps == [7.0, 7.0]


def test_default_fallback_is_a_bounded_exponential() -> None:
    wait = wait_rate_limit(clock=lambda: NOW, extract=cooldown_of)
    sleeps = run([FAILED] * 3, wait)
    assert all(0 <= s <= 60 for s in sleeps)
