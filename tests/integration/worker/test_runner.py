"""Runner against the simulator with the real CLI: usage, tools, structured output, watchdogs, cancel, secrets."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.run import procs
from claudeq.worker.run.launcher import bundled_cli
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.run.prices import cost_usd
from claudeq.worker.run.runner import Runner, RunRequest
from tests.support.procs import run_until
from tests.support.sample_tools import CALL_LOG_VAR

pytestmark = pytest.mark.integration

TOKENS = {
    "alpha": "sk-ant-oat01-test-alpha",
    "beta": "sk-ant-oat01-test-beta",
    "capped": "sk-ant-oat01-test-capped",
    "stranger": "sk-ant-oat01-test-stranger",  # known to claudeq, not to the simulator
}
REDIS_URL_WITH_PASSWORD = "redis://:runner-test-password@127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    config = {
        "accounts": [
            {"name": "alpha", "token": TOKENS["alpha"], "kind": "oauth"},
            {"name": "beta", "token": TOKENS["beta"], "kind": "oauth"},
            # Past its window from the start: every request is rejected until the window resets.
            {
                "name": "capped",
                "token": TOKENS["capped"],
                "kind": "oauth",
                "windows": [{"family": "5h", "length_s": 3600, "requests": 1, "used_requests": 1}],
            },
        ]
    }
    with SimulatorServer(config) as server:
        yield server


@pytest.fixture
def runner(sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Runner:
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"CQT_RUNNER_TOKEN_{name.upper()}", token)
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", REDIS_URL_WITH_PASSWORD)
    monkeypatch.setenv(CALL_LOG_VAR, str(tmp_path / "tool-calls.log"))
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        run_root=tmp_path / "runs",
        cli_max_retries=0,
        policy=WorkerPolicy(mcp_tools_module="tests.support.sample_tools"),
    )
    pool = AccountPool(
        accounts=[
            AccountConfig(name=name, kind="oauth", token_env=f"CQT_RUNNER_TOKEN_{name.upper()}", base_url=sim.base_url)
            for name in TOKENS
        ]
    )
    settings.__dict__["accounts"] = pool  # fill the cached_property: no accounts file needed
    return Runner(settings)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == type_]


def request(runner: Runner, account: str, job_id: str, **spec: Any) -> RunRequest:
    acct = runner.settings.accounts.get(account)
    assert acct is not None
    return RunRequest(job_id=job_id, attempt=1, spec=JobSpec(**spec), account=acct)


async def run(
    runner: Runner, account: str, job_id: str, cancel: asyncio.Event | None = None, **spec: Any
) -> tuple[RunOutcome, Recorder]:
    recorder = Recorder()
    outcome = await runner.run(request(runner, account, job_id, **spec), recorder, cancel or asyncio.Event())
    assert procs.job_pids(job_id) == [], "a claude process outlived run()"
    run_root = runner.settings.run_root
    assert run_root is not None
    assert not list(run_root.glob(f"claudeq-run-{job_id}-*")), "the per-run config dir was not removed"
    return outcome, recorder


def read_lines(path: Path) -> list[str]:
    return path.read_text().split()


def proc_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_text()
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


async def wait_for_cli(job_id: str, timeout_s: float = 20) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = procs.job_pids(job_id)
        if pids:
            return pids[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no CLI process for {job_id}")


async def test_success_usage_matches_simulator_and_no_builtin_tools(
    runner: Runner, sim: SimulatorServer, unique: str
) -> None:
    outcome, rec = await run(runner, "alpha", f"ok-{unique}", prompt='Say hello [[sim: text "hello there"]]')
    assert outcome.got_result and not outcome.is_error, outcome
    assert outcome.stopped_by is None and outcome.exception is None
    assert outcome.result.text == "hello there"
    assert rec.types()[:2] == ["run_started", "session"]
    assert "assistant_text" in rec.types() and rec.types()[-1] == "result"
    sid = outcome.session_id
    assert sid is not None
    stats = sim.stats()["sessions"][sid]
    usage = outcome.result.usage
    assert stats["tokens"] == {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_creation": usage.cache_creation_tokens,
    }
    [model] = usage.model_usage
    # The CLI asks for one-hour cache writes (priced at 2x input); the request log says how many were.
    one_hour = sum(r["usage"]["cache_creation_1h"] for r in sim.requests() if r["session_id"] == sid)
    expected = cost_usd(
        model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_5m_tokens=usage.cache_creation_tokens - one_hour,
        cache_write_1h_tokens=one_hour,
    )
    assert usage.cost_usd == pytest.approx(expected, rel=1e-6)
    assert usage.cost_usd > 0
    main = [r for r in sim.requests() if r["session_id"] == sid and r["kind"] == "main"]
    assert main and all(r["tool_names"] == [] for r in main)  # default profile: no built-in tools offered


async def test_mcp_tool_runs_in_this_process(runner: Runner, sim: SimulatorServer, unique: str) -> None:
    prompt = 'Use the tools [[sim: tool mcp__claudeq__whoami {}]] [[sim: tool mcp__claudeq__add {"a": 2, "b": 3}]]'
    outcome, rec = await run(runner, "alpha", f"tool-{unique}", prompt=prompt, mcp_tools=["add", "whoami"])
    assert outcome.got_result and not outcome.is_error, outcome
    assert outcome.tool_calls == ["mcp__claudeq__whoami", "mcp__claudeq__add"]
    assert "sum=5" in (outcome.result.text or "")
    calls = rec.of("tool_call")
    results = rec.of("tool_result")
    assert [c["tool"] for c in calls] == outcome.tool_calls
    assert [r["text"] for r in results] == [f"pid={os.getpid()}", "sum=5"]
    assert [r["id"] for r in results] == [c["id"] for c in calls]
    assert read_lines(Path(os.environ[CALL_LOG_VAR])) == [str(os.getpid())]


async def test_structured_output(runner: Runner, unique: str) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "why": {"type": "string"}},
        "required": ["answer", "why"],
    }
    outcome, _ = await run(
        runner,
        "alpha",
        f"schema-{unique}",
        prompt='Answer [[sim: structured {"answer": 42, "why": "because"}]]',
        output_schema=schema,
    )
    assert outcome.got_result and not outcome.is_error, outcome
    assert outcome.result.structured_output == {"answer": 42, "why": "because"}
    jsonschema.validate(outcome.result.structured_output, schema)


async def test_idle_watchdog_stops_a_stall_and_cli_env_holds_only_own_token(runner: Runner, unique: str) -> None:
    job_id = f"stall-{unique}"
    task = asyncio.create_task(run(runner, "alpha", job_id, prompt="Stall [[sim: stall 60]]", idle_timeout_s=2))
    pid = await wait_for_cli(job_id)
    environ = proc_environ(pid)
    started = time.monotonic()
    outcome, rec = await task
    elapsed = time.monotonic() - started
    assert outcome.stopped_by == "idle"
    assert rec.of("stopped") == [{"reason": "idle"}]
    assert outcome.duration_s < 2 + 8, outcome.duration_s  # idle 2 s + CLI start + stop, generous slack
    assert elapsed < 8
    usage = outcome.result.usage
    assert usage.input_tokens + usage.cache_creation_tokens > 0  # a stalled request was still billed
    # Secrets: only this run's own token, under the variable the CLI reads.
    values = list(environ.values())
    assert environ["CLAUDE_CODE_OAUTH_TOKEN"] == TOKENS["alpha"]
    for name in ("CQT_RUNNER_TOKEN_BETA", "CQT_RUNNER_TOKEN_ALPHA", "CLAUDEQ_REDIS_URL"):
        assert name not in environ, name  # an allow-list: not even blank
    assert not any(TOKENS["beta"] in v or "runner-test-password" in v for v in values)
    assert sum(TOKENS["alpha"] in v for v in values) == 1
    assert environ["CLAUDEQ_JOB_ID"] == job_id


async def test_a_slow_cli_start_does_not_count_against_the_first_byte(
    runner: Runner, tmp_path: Path, unique: str
) -> None:
    """The first-byte timer counts again from when the CLI has the prompt: a CLI that takes longer to come up than
    the job's first-byte timeout (a loaded host) still gets its answer, while a silent model is still stopped."""
    slow = tmp_path / "slow-claude"
    slow.write_text(f'#!/bin/sh\nsleep 2.5\nexec "{bundled_cli()}" "$@"\n')
    slow.chmod(0o755)
    settings = runner.settings.model_copy(update={"cli_path": slow})
    settings.__dict__["accounts"] = runner.settings.accounts
    slow_runner = Runner(settings)
    outcome, _ = await run(
        slow_runner, "alpha", f"slowstart-{unique}", prompt='hi [[sim: text "up"]]', first_byte_timeout_s=2
    )
    assert outcome.stopped_by is None, outcome
    assert outcome.got_result and not outcome.is_error and outcome.result.text == "up"
    silent, rec = await run(
        slow_runner, "alpha", f"slowsilent-{unique}", prompt="hi [[sim: delay 30]]", first_byte_timeout_s=2
    )
    assert silent.stopped_by == "first_byte"
    assert rec.of("stopped") == [{"reason": "first_byte"}]


async def test_cancel_during_stall_returns_quickly(runner: Runner, sim: SimulatorServer, unique: str) -> None:
    job_id = f"cancel-{unique}"
    cancel = asyncio.Event()
    prompt = f"Stall {unique} [[sim: stall 60]]"
    task = asyncio.create_task(run(runner, "alpha", job_id, cancel=cancel, prompt=prompt))
    await wait_for_cli(job_id)

    # The stall is reached when its request is at the simulator (on a loaded host the CLI's start takes seconds).
    def at_sim() -> bool:
        return any(unique in json.dumps(r) for r in sim.requests())

    await asyncio.to_thread(run_until, at_sim, 30, 0.1, what="the stall's request at the simulator")
    started = time.monotonic()
    cancel.set()
    outcome, rec = await task
    assert time.monotonic() - started < 1.5
    assert outcome.stopped_by == "cancel"
    assert rec.types()[-1] == "stopped"
    assert outcome.session_id is not None  # kept for the record


async def test_cancelling_run_itself_leaves_no_cli(runner: Runner, unique: str) -> None:
    job_id = f"taskcancel-{unique}"
    task = asyncio.create_task(run(runner, "alpha", job_id, prompt="Stall [[sim: stall 60]]"))
    await wait_for_cli(job_id)
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert procs.job_pids(job_id) == []


async def test_rejected_rate_limit_is_a_signal_with_resets_at(runner: Runner, unique: str) -> None:
    outcome, rec = await run(runner, "capped", f"rl-{unique}", prompt="hello")
    assert outcome.is_error
    signal = outcome.rejected
    assert signal is not None, outcome.rate_limits
    assert signal.resets_at is not None and signal.resets_at.tzinfo is not None
    assert signal.resets_at.timestamp() > time.time()
    assert signal.window == "five_hour"
    assert any(e["status"] == "rejected" for e in rec.of("rate_limit"))


async def test_unknown_token_is_authentication_failed(runner: Runner, unique: str) -> None:
    outcome, _ = await run(runner, "stranger", f"auth-{unique}", prompt="hello")
    assert outcome.is_error
    assert outcome.assistant_error == "authentication_failed"
    assert TOKENS["stranger"] not in repr(outcome)


def _cmdlines_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and procs.alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_cancel_also_kills_commands_a_tool_started(runner: Runner, unique: str) -> None:
    # A shell tool's command is a child of the CLI, not of the worker: stopping the run must end it too.
    # A run with Bash runs under a uid of its own, which must be able to enter the run root (tmp_path cannot be).
    run_root = Path(tempfile.mkdtemp(prefix="cqt-shell-runs-", dir="/tmp"))
    os.chmod(run_root, 0o711)
    update = {"policy": WorkerPolicy(allowed_tools=["Bash"]), "run_root": run_root}
    settings = runner.settings.model_copy(update=update)
    settings.__dict__["accounts"] = runner.settings.accounts
    shell_runner = Runner(settings)
    marker = f"cqt-sleeper-{unique}"
    # The marker is an argument, so it shows in the command's own /proc cmdline (a shell may exec it directly).
    command = {"command": f"python3 -c 'import time; time.sleep(123)' {marker}", "description": "wait"}
    job_id = f"shell-{unique}"
    cancel = asyncio.Event()
    prompt = f"Wait. [[sim: tool Bash {json.dumps(command)}]]"
    task = asyncio.create_task(run(shell_runner, "alpha", job_id, cancel=cancel, prompt=prompt, tools=["Bash"]))
    for _ in range(300):  # up to ~30 s for the CLI to start and run the tool
        if _cmdlines_with(marker):
            break
        await asyncio.sleep(0.1)
    assert _cmdlines_with(marker), "the Bash tool never started its command"
    cancel.set()
    outcome, _ = await task
    shutil.rmtree(run_root, ignore_errors=True)
    assert outcome.stopped_by == "cancel"
    await asyncio.sleep(0.2)
    assert _cmdlines_with(marker) == [], "a tool's command outlived the run"
