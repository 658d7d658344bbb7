"""The benchmark-only fake runner: chosen by CLAUDEQ_BENCH_FAKE_RUNNER, it sleeps, emits a short run's events and
reports a success with usage (or a cancel), and the failure policy reads that as it reads a real run."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from claudeq.config.account_pool import AccountConfig
from claudeq.models import Event, JobSpec, utcnow
from claudeq.worker.delivery.failure import decide
from claudeq.worker.run.fake_runner import BENCH_FAKE_RUNNER_ENV, FakeRunner, fake_run_seconds
from claudeq.worker.run.outcome import RunOutcome


def _req() -> SimpleNamespace:
    return SimpleNamespace(
        job_id="j",
        attempt=1,
        spec=JobSpec(prompt="p"),
        account=AccountConfig(name="a", kind="oauth", token_env="T"),
        account_reason="least used",
    )


def test_selected_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BENCH_FAKE_RUNNER_ENV, raising=False)
    assert fake_run_seconds() is None
    monkeypatch.setenv(BENCH_FAKE_RUNNER_ENV, "0.25")
    assert fake_run_seconds() == 0.25
    monkeypatch.setenv(BENCH_FAKE_RUNNER_ENV, "-1")
    with pytest.raises(ValueError, match=BENCH_FAKE_RUNNER_ENV):
        fake_run_seconds()


def test_a_fake_run_succeeds_with_usage_and_events() -> None:
    seen: list[Event] = []

    async def emit(event: Event) -> None:
        seen.append(event)

    outcome = asyncio.run(FakeRunner(0.01).run(_req(), emit, asyncio.Event()))
    assert [e.type for e in seen] == ["run_started", "session", "assistant_text", "result"]
    assert outcome.got_result and not outcome.is_error and outcome.result.usage.input_tokens > 0
    assert outcome.result.usage.cost_usd > 0
    req = _req()
    decision = decide(outcome, req.account, 0, 3, now=utcnow(), rate_limit_cooldown_s=60)
    assert decision.outcome == "success"


def test_a_fake_run_stops_on_cancel() -> None:
    async def go() -> RunOutcome:
        cancel = asyncio.Event()

        async def emit(event: Event) -> None:
            if event.type == "session":
                cancel.set()

        return await FakeRunner(60).run(_req(), emit, cancel)

    outcome = asyncio.run(go())
    assert outcome.stopped_by == "cancel"
