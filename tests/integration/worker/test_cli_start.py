"""Big system prompts reach the CLI another way than one argv argument, and a CLI that cannot start for a permanent
reason (E2BIG, ENOENT, EACCES) is a permanent failure, not three transient ones. Real CLI, the
simulator, the real Runner and failure policy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.delivery.failure import Decision, decide
from claudeq.worker.run import procs
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.run.runner import Runner, RunRequest

pytestmark = pytest.mark.integration

TOKEN = "sk-ant-oat01-test-cli-start"
BIG = 200 * 1024  # well over MAX_ARG_STRLEN (128 KiB), the most one argv argument may hold


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer({"accounts": [{"name": "alpha", "token": TOKEN, "kind": "oauth"}]}) as server:
        yield server


def make_runner(sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> Runner:
    monkeypatch.setenv("CQT_CLI_START_TOKEN", TOKEN)
    settings = Settings(_env_file=None, run_root=tmp_path / "runs", cli_max_retries=0, **overrides)  # type: ignore[call-arg]
    pool = AccountPool(
        accounts=[AccountConfig(name="alpha", kind="oauth", token_env="CQT_CLI_START_TOKEN", base_url=sim.base_url)]
    )
    settings.__dict__["accounts"] = pool
    return Runner(settings)


async def run(runner: Runner, job_id: str, spec: JobSpec) -> RunOutcome:
    async def emit(event: Event) -> None:
        return None

    account = runner.settings.accounts.get("alpha")
    assert account is not None
    outcome = await runner.run(RunRequest(job_id=job_id, attempt=1, spec=spec, account=account), emit, asyncio.Event())
    assert procs.job_pids(job_id) == []
    return outcome


def first_of_three(outcome: RunOutcome) -> Decision:
    account = AccountConfig(name="alpha", kind="oauth", token_env="CQT_CLI_START_TOKEN")
    return decide(outcome, account, 0, 3, now=datetime.now(UTC), rate_limit_cooldown_s=60)


def system_lengths(sim: SimulatorServer, session_id: str | None) -> list[int]:
    return [r["system_text_len"] for r in sim.requests() if r["session_id"] == session_id and r["kind"] == "main"]


async def test_a_system_prompt_over_the_argv_limit_reaches_the_model(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    runner = make_runner(sim, tmp_path, monkeypatch)
    system = "You are terse. " + "x" * BIG
    spec = JobSpec(prompt='hi [[sim: text "ok"]]', system_prompt=system, append_system_prompt="Also: be kind.")
    outcome = await run(runner, f"bigsys-{unique}", spec)
    assert outcome.exception is None, outcome.exception
    assert outcome.got_result and not outcome.is_error
    assert first_of_three(outcome).action == "succeed"
    [length] = system_lengths(sim, outcome.session_id)
    assert length >= len(system) + len("Also: be kind.")
    assert not list((tmp_path / "runs").iterdir())  # the prompt files went with the run dir


async def test_an_append_system_prompt_over_the_argv_limit_reaches_the_model(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    runner = make_runner(sim, tmp_path, monkeypatch)
    small = await run(runner, f"smallapp-{unique}", JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt="!"))
    outcome = await run(
        runner, f"bigapp-{unique}", JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt="y" * BIG)
    )
    assert outcome.exception is None, outcome.exception
    assert outcome.got_result and not outcome.is_error
    [base] = system_lengths(sim, small.session_id)
    [length] = system_lengths(sim, outcome.session_id)
    # The default prompt, plus all of the appended text (the default prompt varies by a few characters per run).
    assert length - base > BIG - 64


async def test_e2big_at_spawn_is_a_permanent_failure(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    # A spec field that still goes on the command line, grown past MAX_ARG_STRLEN (submit refuses it now; an old
    # record or a producer of another version may still carry it).
    runner = make_runner(sim, tmp_path, monkeypatch)
    outcome = await run(runner, f"e2big-{unique}", JobSpec(prompt="hi", model="claude-" + "x" * BIG))
    assert not outcome.got_result
    decision = first_of_three(outcome)
    assert decision.action == "fail", decision
    assert decision.error is not None and not decision.error.retryable
    assert decision.error.kind == "input"
    assert "Argument list too long" in decision.error.message


async def test_a_cli_that_cannot_be_executed_is_a_permanent_failure(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    # An executable whose interpreter is missing: the exec inside the wrapper fails with ENOENT.
    broken = tmp_path / "claude"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    runner = make_runner(sim, tmp_path, monkeypatch, cli_path=broken)
    outcome = await run(runner, f"enoent-{unique}", JobSpec(prompt="hi"))
    assert not outcome.got_result
    decision = first_of_three(outcome)
    assert decision.action == "fail", decision
    assert decision.error is not None and not decision.error.retryable
    assert decision.error.kind == "configuration"
