"""Prompts are cacheable across jobs, and the base prompt is chosen, not implied by another field. The real CLI,
the simulator (which caches prefixes as the API does) and the real Runner; see docs/cli-behaviour.md#prompt-caching
and docs/jobs.md#the-base-prompt."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.run.runner import Runner, RunRequest

pytestmark = pytest.mark.integration

TOKEN = "sk-ant-oat01-test-prompt-cache"
APPEND = "Follow the house rules of this repository.\n" + "r" * 30_000  # a team's ~30 KB of instructions


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer({"accounts": [{"name": "alpha", "token": TOKEN, "kind": "oauth"}]}) as server:
        yield server


def make_runner(sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> Runner:
    monkeypatch.setenv("CQT_PROMPT_CACHE_TOKEN", TOKEN)
    settings = Settings(_env_file=None, run_root=tmp_path / "runs", cli_max_retries=0, **overrides)  # type: ignore[call-arg]
    pool = AccountPool(
        accounts=[AccountConfig(name="alpha", kind="oauth", token_env="CQT_PROMPT_CACHE_TOKEN", base_url=sim.base_url)]
    )
    settings.__dict__["accounts"] = pool
    return Runner(settings)


async def run(runner: Runner, job_id: str, spec: JobSpec) -> RunOutcome:
    async def emit(event: Event) -> None:
        return None

    account = runner.settings.accounts.get("alpha")
    assert account is not None
    outcome = await runner.run(RunRequest(job_id=job_id, attempt=1, spec=spec, account=account), emit, asyncio.Event())
    assert outcome.exception is None, outcome.exception
    assert outcome.got_result and not outcome.is_error
    return outcome


def main_request(sim: SimulatorServer, outcome: RunOutcome) -> dict[str, Any]:
    [entry] = [r for r in sim.requests() if r["session_id"] == outcome.session_id and r["kind"] == "main"]
    return entry


async def test_the_second_of_two_identical_jobs_reads_its_system_prefix_from_the_cache(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    runner = make_runner(sim, tmp_path, monkeypatch)
    spec = JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt=APPEND)
    first = main_request(sim, await run(runner, f"cache1-{unique}", spec))
    second = main_request(sim, await run(runner, f"cache2-{unique}", spec))
    assert first["usage"]["cache_read"] == 0
    # The whole system prompt — Claude Code's instructions and the 30 KB append — was written once, then read.
    system_tokens = first["system_text_len"] // 4
    assert second["usage"]["cache_read"] >= system_tokens > len(APPEND) // 4
    assert second["usage"]["cache_creation"] < first["usage"]["cache_creation"] - len(APPEND) // 4


async def test_the_base_prompt_does_not_depend_on_an_append(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    runner = make_runner(sim, tmp_path, monkeypatch)
    line = "Answer in one sentence."
    bare = main_request(sim, await run(runner, f"bare-{unique}", JobSpec(prompt='hi [[sim: text "ok"]]')))
    extended = main_request(
        sim, await run(runner, f"line-{unique}", JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt=line))
    )
    # The same base prompt, extended by the line and the blank line before it; only the CLI's one-line identity
    # differs ("You are Claude Code, …" with an append, "You are a Claude agent, …" without: 32 characters).
    assert len(line) < extended["system_text_len"] - bare["system_text_len"] <= len(line) + 40


@pytest.mark.parametrize("where", ["spec", "fleet"])
async def test_the_minimal_base_prompt_is_the_append_alone(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str, where: str
) -> None:
    line = "Answer in one sentence."
    if where == "spec":
        runner = make_runner(sim, tmp_path, monkeypatch)
        spec = JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt=line, base_prompt="minimal")
    else:
        runner = make_runner(sim, tmp_path, monkeypatch, base_prompt="minimal")
        spec = JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt=line)
    minimal = main_request(sim, await run(runner, f"min-{unique}", spec))
    full = main_request(
        sim,
        await run(runner, f"full-{unique}", JobSpec(prompt='hi [[sim: text "ok"]]', base_prompt="claude_code")),
    )
    # The CLI's one-line identity and the billing header stay; none of Claude Code's instructions.
    assert len(line) <= minimal["system_text_len"] < len(line) + 400
    assert full["system_text_len"] > 4_000


async def test_with_the_per_run_sections_in_the_system_prompt_the_append_is_never_read(
    sim: SimulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    # CLAUDEQ_CACHEABLE_PROMPTS=false: the preset names the run's own memory directory 3.4 KB in, as before.
    runner = make_runner(sim, tmp_path, monkeypatch, cacheable_prompts=False)
    spec = JobSpec(prompt='hi [[sim: text "ok"]]', append_system_prompt=APPEND)
    await run(runner, f"dyn1-{unique}", spec)
    second = main_request(sim, await run(runner, f"dyn2-{unique}", spec))
    assert second["usage"]["cache_read"] < 3_500 // 4  # at most the identity and the instructions before the path
    assert second["usage"]["cache_creation"] > len(APPEND) // 4
