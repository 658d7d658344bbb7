"""wait_rate_limit: a retry after a rejection waits for the reset, anything else falls back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from claudeq.errors import RateLimited
from claudeq.worker.waits import wait_rate_limit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def run(errors: list[Exception], wait: wait_rate_limit) -> list[float]:
    """Drive a real tenacity loop that raises `errors` in turn; return the sleeps it asked for."""
    sleeps: list[float] = []
    pending = list(errors)

    def attempt() -> str:
        if pending:
            raise pending.pop(0)
        return "ok"

    retrying = Retrying(
        wait=wait, stop=stop_after_attempt(len(errors) + 1), sleep=sleeps.append, retry=retry_if_exception_type()
    )
    assert retrying(attempt) == "ok"
    return sleeps


def test_waits_until_the_reset_plus_jitter() -> None:
    wait = wait_rate_limit(wait_fixed(99), jitter_s=0.5, clock=lambda: NOW, rng=random.Random(1))
    sleeps = run([RateLimited("a", NOW + timedelta(seconds=3), "five_hour")], wait)
    assert len(sleeps) == 1
    assert 3.0 <= sleeps[0] <= 3.5


def test_a_reset_in_the_past_retries_at_once() -> None:
    wait = wait_rate_limit(wait_fixed(99), jitter_s=0, clock=lambda: NOW)
    assert run([RateLimited("a", NOW - timedelta(seconds=3), "five_hour")], wait) == [0.0]


def test_other_errors_and_unknown_resets_use_the_fallback() -> None:
    wait = wait_rate_limit(wait_fixed(7), clock=lambda: NOW)
    sleeps = run([RuntimeError("529"), RateLimited("a", None, None)], wait)
    assert sleeps == [7.0, 7.0]


def test_default_fallback_is_a_bounded_exponential() -> None:
    wait = wait_rate_limit(clock=lambda: NOW)
    sleeps = run([RuntimeError("x")] * 3, wait)
    assert all(0 <= s <= 60 for s in sleeps)


def test_custom_extract_for_result_based_loops() -> None:
    limited = RateLimited("a", NOW + timedelta(seconds=2), "five_hour")
    wait = wait_rate_limit(wait_fixed(99), jitter_s=0, clock=lambda: NOW, extract=lambda state: limited)
    sleeps: list[float] = []
    retrying = Retrying(wait=wait, stop=stop_after_attempt(2), sleep=sleeps.append, retry=retry_if_exception_type())
    with pytest.raises(RetryError):
        retrying(lambda: (_ for _ in ()).throw(ValueError("x")))
    assert sleeps == [2.0]
