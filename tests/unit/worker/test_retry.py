"""Transient retries: full-jitter backoff (tenacity's waits), waits in place only when short, reroutes at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from claudeq.config.settings import Settings
from claudeq.worker.delivery.retry import AttemptLoop, DeferInstead, JobBackoff, Step
from claudeq.worker.delivery.waits import Cooldown
from tests.conftest import make_settings


def cfg(unique: str, **kw: Any) -> Settings:
    values: dict[str, Any] = {"retry_base_s": 0.01, "retry_max_s": 0.05, "retry_in_place_max_s": 1.0}
    values.update(kw)
    return make_settings("redis://127.0.0.1:1/0", unique, **values)


class Script:
    """A step function that returns the given steps in order and counts counted attempts."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.calls = 0
        self.counted = 0
        self.retries: list[tuple[str, float, bool]] = []

    async def step(self) -> Step:
        result = self.steps[self.calls]
        self.calls += 1
        if result.kind == "retry" or result.status == "failed":
            self.counted += 1
        return result

    async def on_retry(self, step: Step, wait_s: float, in_place: bool) -> None:
        self.retries.append((step.reason, wait_s, in_place))


async def go(script: Script, settings: Settings, interrupt: asyncio.Event | None = None, passes: int = 10) -> Step:
    """The script's passes driven as the handler drives a delivery's attempts (DeliveryHandler._handle)."""
    loop = AttemptLoop(settings, counted=lambda: script.counted, max_passes=passes)
    step = await script.step()
    while (wait_s := loop.next_wait(step)) is not None:
        if step.kind in ("retry", "wait"):
            await script.on_retry(step, wait_s, loop.in_place(wait_s))
        await loop.pause(wait_s, interrupt or asyncio.Event())
        step = await script.step()
    return step


async def test_transient_failures_retry_with_a_retry_hook_each(unique: str) -> None:
    script = Script(Step("retry", reason="transient"), Step("retry", reason="timeout"), Step("done", "succeeded"))
    result = await go(script, cfg(unique))
    assert result == Step("done", "succeeded")
    assert script.calls == 3
    assert [r[0] for r in script.retries] == ["transient", "timeout"]
    assert all(0 <= wait <= 0.05 and in_place for _, wait, in_place in script.retries)


async def test_reroutes_go_at_once_without_a_retry_hook(unique: str) -> None:
    script = Script(Step("reroute"), Step("reroute"), Step("done", "succeeded"))
    started = time.monotonic()
    assert (await go(script, cfg(unique, retry_base_s=5, retry_max_s=5))).status == "succeeded"
    assert time.monotonic() - started < 1
    assert script.retries == []


async def test_long_backoff_defers_instead_of_waiting(unique: str) -> None:
    script = Script(Step("retry", reason="transient"), Step("done", "succeeded"))
    settings = cfg(unique, retry_base_s=30, retry_max_s=30, retry_in_place_max_s=0)
    with pytest.raises(DeferInstead) as info:
        await go(script, settings)
    assert 0 < info.value.wait_s <= 30
    assert script.calls == 1
    assert script.retries and script.retries[0][2] is False  # the hook saw it would not wait in place


async def test_interrupt_cuts_a_wait_in_place_short(unique: str) -> None:
    script = Script(Step("retry", reason="transient"), Step("done", "cancelled"))
    interrupt = asyncio.Event()
    settings = cfg(unique, retry_base_s=0.9, retry_max_s=0.9, retry_in_place_max_s=1.0)
    asyncio.get_running_loop().call_later(0.01, interrupt.set)
    started = time.monotonic()
    # The jittered wait may be tiny; either way the second pass runs well before 0.9 s when interrupted early.
    assert (await go(script, settings, interrupt)).status == "cancelled"
    assert time.monotonic() - started < 0.5


async def test_max_passes_bounds_endless_reroutes(unique: str) -> None:
    script = Script(*[Step("reroute")] * 10)
    assert (await go(script, cfg(unique), passes=3)) == Step("reroute")
    assert script.calls == 3


def test_backoff_is_full_jitter_and_grows_with_counted_attempts(unique: str) -> None:
    settings = cfg(unique, retry_base_s=1.0, retry_max_s=60.0)
    backoff = JobBackoff(settings, counted=lambda: 1)
    first = [backoff.compute(1) for _ in range(300)]
    fifth = [backoff.compute(5) for _ in range(300)]
    assert all(0 <= w <= 1.0 for w in first)
    assert all(0 <= w <= 16.0 for w in fifth)
    assert max(fifth) > 2.0 and min(first) < 0.5  # a widening window, drawn uniformly from zero
    assert all(w <= 60 for w in (backoff.compute(20) for _ in range(50)))


async def test_a_wait_step_sleeps_until_the_cooldown_ends_not_a_blind_backoff(unique: str) -> None:
    from datetime import timedelta

    from claudeq.models import utcnow

    limited = Cooldown(utcnow() + timedelta(seconds=0.6))
    script = Script(Step("wait", reason="rate_limit", cooldown=limited), Step("done", "succeeded"))
    started = time.monotonic()
    result = await go(script, cfg(unique, retry_in_place_max_s=2.0))
    assert result == Step("done", "succeeded")
    [(reason, wait_s, in_place)] = script.retries
    assert reason == "rate_limit"
    assert in_place
    assert 0.5 <= wait_s <= 0.6 + 0.5 + 0.05  # until the reset, plus at most the jitter
    assert time.monotonic() - started >= 0.5


async def test_a_wait_past_the_in_place_bound_defers(unique: str) -> None:
    from datetime import timedelta

    from claudeq.models import utcnow

    limited = Cooldown(utcnow() + timedelta(seconds=30))
    script = Script(Step("wait", reason="rate_limit", cooldown=limited), Step("done", "succeeded"))
    with pytest.raises(DeferInstead) as info:
        await go(script, cfg(unique, retry_in_place_max_s=2.0))
    assert info.value.wait_s >= 29
