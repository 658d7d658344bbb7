"""Warm CLIs in the runner, with the real CLI, the pass-through and the simulator: reuse only for the same options,
cleared between jobs, per-job session and usage, never reused after an abnormal end, stand-ins parked and revoked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.passthrough.server import PassThrough
from claudeq.worker.run import procs
from claudeq.worker.run.outcome import RunOutcome, RunRequest
from claudeq.worker.run.runner import Runner

pytestmark = pytest.mark.integration

TOKEN = "sk-ant-oat01-test-warm-alpha"
OTHER = "sk-ant-oat01-test-warm-beta"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    config = {
        "accounts": [
            {"name": "alpha", "token": TOKEN, "kind": "oauth"},
            {"name": "beta", "token": OTHER, "kind": "oauth"},
        ]
    }
    with SimulatorServer(config) as server:
        yield server


@pytest.fixture
def passthrough() -> Iterator[PassThrough]:
    server = PassThrough()
    server.start()
    yield server
    server.close()


@pytest.fixture
async def runner(
    sim: SimulatorServer, passthrough: PassThrough, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runner]:
    monkeypatch.setenv("CQT_WARM_ALPHA", TOKEN)
    monkeypatch.setenv("CQT_WARM_BETA", OTHER)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, run_root=tmp_path / "runs", cli_max_retries=0, warm_clients=2, concurrency=2
    )
    settings.__dict__["accounts"] = AccountPool(
        accounts=[
            AccountConfig(name="alpha", kind="oauth", token_env="CQT_WARM_ALPHA", base_url=sim.base_url),
            AccountConfig(name="beta", kind="oauth", token_env="CQT_WARM_BETA", base_url=sim.base_url),
        ]
    )
    runner = Runner(settings, passthrough=passthrough)
    yield runner
    await runner.pool.close()
    assert runner.pool.idle == 0
    assert passthrough.runs == 0, "a stand-in outlived its CLI"


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == type_]


async def run(
    runner: Runner, prompt: str, account: str = "alpha", cancel: asyncio.Event | None = None, **spec: Any
) -> tuple[RunOutcome, Recorder]:
    acct = runner.settings.accounts.get(account)
    assert acct is not None
    recorder = Recorder()
    req = RunRequest(job_id=f"warm-{time.monotonic_ns()}", attempt=1, spec=JobSpec(prompt=prompt, **spec), account=acct)
    outcome = await runner.run(req, recorder, cancel or asyncio.Event())
    return outcome, recorder


def reconfigure(runner: Runner, **changes: Any) -> None:
    """The runner and its pool with other settings (settings are frozen)."""
    runner.settings = runner.settings.model_copy(update=changes)
    runner.pool.settings = runner.settings


async def settled(runner: Runner, idle: int) -> None:
    """Wait until the pool holds `idle` idle CLIs (clearing happens after a run returns)."""
    for _ in range(200):
        if runner.pool.idle == idle and not runner.pool._clearing:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"pool: {runner.pool.idle} idle, expected {idle}")


def sim_session(sim: SimulatorServer, session_id: str | None) -> dict[str, Any]:
    assert session_id is not None
    session: dict[str, Any] = sim.stats()["sessions"][session_id]
    return session


async def test_same_options_reuse_one_cli_each_job_with_its_own_session_and_usage(
    runner: Runner, sim: SimulatorServer, unique: str
) -> None:
    outcomes: list[RunOutcome] = []
    warm: list[bool] = []
    for n, (tin, tout) in enumerate([(120, 40), (70, 90), (30, 10), (55, 5)]):
        outcome, recorder = await run(runner, f"job {n} {unique} [[sim: tokens in={tin} out={tout}]]")
        assert outcome.got_result and not outcome.is_error, outcome
        outcomes.append(outcome)
        warm.append(bool(recorder.of("run_started")[0]["warm"]))
        await settled(runner, 1)
    assert warm == [False, True, True, True]
    assert runner.pool.started == 1 and runner.pool.reused == 3
    sessions = [o.session_id for o in outcomes]
    assert len(set(sessions)) == 4, sessions
    for outcome, (tin, tout) in zip(outcomes, [(120, 40), (70, 90), (30, 10), (55, 5)], strict=True):
        usage = outcome.result.usage
        # Per job, never cumulative: what the simulator billed that job's session, and the CLI's own cost of it.
        assert (usage.input_tokens, usage.output_tokens) == (tin, tout)
        billed = sim_session(sim, outcome.session_id)
        assert billed["requests"] == 1
        assert (billed["tokens"]["input"], billed["tokens"]["output"]) == (tin, tout)
        assert usage.cost_usd == pytest.approx(tin * 2e-6 + tout * 1e-5)
    # The CLI's config dir keeps no earlier job's transcript (it is in the session store).
    run_root = runner.settings.run_root
    assert run_root is not None
    assert [p for s in sessions for p in run_root.glob(f"**/{s}.jsonl")] == []


async def test_other_options_or_account_never_share_a_cli(runner: Runner, unique: str) -> None:
    await run(runner, f"a {unique}")
    await settled(runner, 1)
    variants: list[tuple[str, dict[str, Any]]] = [
        ("alpha", {"model": "haiku"}),
        ("alpha", {"system_prompt": "You are terse."}),
        ("alpha", {"max_turns": 3}),
        ("beta", {}),
    ]
    for account, spec in variants:
        _, recorder = await run(runner, f"b {unique}", account=account, **spec)
        assert recorder.of("run_started")[0]["warm"] is False, (account, spec)
        await asyncio.sleep(0)
    assert runner.pool.reused == 0
    # The same options again find theirs.
    _, recorder = await run(runner, f"c {unique}", account="beta")
    assert recorder.of("run_started")[0]["warm"] is True


async def test_an_error_result_never_returns_its_cli(runner: Runner, unique: str) -> None:
    await run(runner, f"first {unique}")
    await settled(runner, 1)
    [idle_id] = runner.pool.idle_ids()
    outcome, recorder = await run(runner, f"fails {unique} [[sim: error 529]]")
    assert outcome.is_error
    assert recorder.of("run_started")[0]["warm"] is True
    await settled(runner, 0)
    assert procs.run_pids(idle_id) == []
    assert runner.pool.stopped.get("abnormal") == 1


@pytest.mark.parametrize("how", ["cancel", "timeout"])
async def test_a_job_cancelled_or_timed_out_mid_run_never_returns_its_cli(
    runner: Runner, passthrough: PassThrough, unique: str, how: str
) -> None:
    await run(runner, f"first {unique}")
    await settled(runner, 1)
    [cli_id] = runner.pool.idle_ids()
    [grant] = [g for g in passthrough._grants.values() if g.run_id == cli_id]
    cancel = asyncio.Event()
    extra: dict[str, Any] = {"idle_timeout_s": 2.0} if how == "timeout" else {}
    task = asyncio.create_task(run(runner, f"stalls {unique} [[sim: stall 30]]", cancel=cancel, **extra))
    if how == "cancel":
        for _ in range(400):
            if passthrough.runs and not grant.parked and procs.run_pids(cli_id):
                break
            await asyncio.sleep(0.025)
        await asyncio.sleep(0.5)  # the request is streaming
        cancel.set()
    outcome, recorder = await task
    assert recorder.of("run_started")[0]["warm"] is True
    assert outcome.stopped_by == ("cancel" if how == "cancel" else "idle")
    await asyncio.sleep(0.2)
    assert runner.pool.idle == 0 and not runner.pool._clearing
    assert procs.run_pids(cli_id) == [], "the stopped CLI left processes"
    assert not passthrough.valid(grant), "its stand-in still works"
    # The next job starts a new CLI.
    _, recorder = await run(runner, f"after {unique}")
    assert recorder.of("run_started")[0]["warm"] is False


async def test_an_idle_cli_stand_in_is_refused_and_revoked_once_it_stops(
    runner: Runner, passthrough: PassThrough, sim: SimulatorServer, unique: str
) -> None:
    await run(runner, f"first {unique}")
    await settled(runner, 1)
    [cli_id] = runner.pool.idle_ids()
    [grant] = [g for g in passthrough._grants.values() if g.run_id == cli_id]
    assert grant.parked
    body = {"model": "claude-sonnet-5-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {grant.token}", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(trust_env=False) as client:
        idle = await client.post(f"{passthrough.base_url}/v1/messages?beta=true", json=body, headers=headers)
        assert idle.status_code == 401 and "idle" in idle.text
        assert grant.idle_requests == 1
        # A CLI that called the API while idle is not reused.
        _, recorder = await run(runner, f"second {unique}")
        assert recorder.of("run_started")[0]["warm"] is False
        await settled(runner, 1)
        assert procs.run_pids(cli_id) == []
        gone = await client.post(f"{passthrough.base_url}/v1/messages?beta=true", json=body, headers=headers)
        assert gone.status_code == 401 and "unknown or expired" in gone.text


async def test_idle_clis_expire_and_are_stopped_for_room(runner: Runner, unique: str) -> None:
    reconfigure(runner, warm_idle_s=0.5)
    await run(runner, f"first {unique}")
    await settled(runner, 1)
    [cli_id] = runner.pool.idle_ids()
    await settled(runner, 0)  # the reaper takes it out of the pool, then stops it
    for _ in range(400):
        if procs.run_pids(cli_id) == []:
            break
        await asyncio.sleep(0.025)
    assert procs.run_pids(cli_id) == [] and runner.pool.stopped.get("idle") == 1
    reconfigure(runner, warm_idle_s=60)
    # Two idle CLIs of other options fill max(concurrency, budget) = 2: a cold start stops the oldest.
    await run(runner, f"m1 {unique}", model="haiku")
    await run(runner, f"m2 {unique}", model="opus")
    await settled(runner, 2)
    oldest = runner.pool.idle_ids()[0]
    await run(runner, f"m3 {unique}", max_turns=2)
    assert runner.pool.stopped.get("room", 0) >= 1
    assert oldest not in runner.pool.idle_ids() and procs.run_pids(oldest) == []


async def test_a_cli_is_stopped_after_max_jobs(runner: Runner, unique: str) -> None:
    reconfigure(runner, warm_max_jobs=2)
    await run(runner, f"1 {unique}")
    await settled(runner, 1)
    [cli_id] = runner.pool.idle_ids()
    await run(runner, f"2 {unique}")
    await asyncio.sleep(0.3)
    assert runner.pool.idle == 0 and procs.run_pids(cli_id) == []
    assert runner.pool.stopped.get("max_jobs") == 1


async def test_jobs_that_must_run_cold(runner: Runner, unique: str) -> None:
    acct = runner.settings.accounts.get("alpha")
    assert acct is not None

    def refusal(**kw: Any) -> str | None:
        spec = JobSpec(prompt=f"x {unique}", **{k: v for k, v in kw.items() if k in JobSpec.model_fields})
        req = RunRequest(job_id="j", attempt=1, spec=spec, account=acct, resume=kw.get("resume"))
        return runner.warm_refusal(req)

    assert refusal() is None
    assert refusal(conversation="c1") is not None
    assert refusal(resume="0e0b1e37-0000-4000-8000-000000000000") is not None
    reconfigure(runner, warm_clients=0)
    assert refusal() == "warm CLIs are off"
