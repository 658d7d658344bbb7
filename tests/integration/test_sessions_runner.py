"""The runner with a session store, real CLI against the simulator: transcripts are mirrored to Redis (the per-run
CLAUDE_CONFIG_DIR is where the mirror looks), and a failing store surfaces as `mirror_error` events, never as a
failed run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from claude_agent_sdk import project_key_for_directory
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.transcripts import RedisSessionStore
from claudeq.worker.run.runner import Runner, RunRequest
from claudeq.worker.run.workdirs import default_cwd

pytestmark = pytest.mark.integration

TOKEN = "sk-ant-oat01-test-sessions"


class BrokenStore:
    """Duck-typed (required methods only); every append fails, so the SDK reports a MirrorErrorMessage."""

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        raise ConnectionError("store down")

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        return None


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer({"accounts": [{"name": "s", "token": TOKEN, "kind": "oauth"}]}) as server:
        yield server


def _runner_and_account(
    sim: SimulatorServer, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Runner, AccountConfig]:
    monkeypatch.setenv("CQT_SESSIONS_TOKEN", TOKEN)
    cfg = settings.model_copy(update={"run_root": tmp_path / "runs", "cli_max_retries": 0})
    return Runner(cfg), AccountConfig(name="s", kind="oauth", token_env="CQT_SESSIONS_TOKEN", base_url=sim.base_url)


async def _run(runner: Runner, account: AccountConfig, store: Any, prompt: str) -> tuple[Any, list[Event]]:
    seen: list[Event] = []

    async def emit(event: Event) -> None:
        seen.append(event)

    request = RunRequest(job_id="sess-it", attempt=1, spec=JobSpec(prompt=prompt), account=account, session_store=store)
    outcome = await runner.run(request, emit, asyncio.Event())
    return outcome, seen


async def test_run_transcript_is_mirrored_to_redis(
    sim: SimulatorServer,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    aredis: aioredis.Redis,
) -> None:
    runner, account = _runner_and_account(sim, settings, tmp_path, monkeypatch)
    store = RedisSessionStore.from_settings(settings, aredis)
    outcome, _ = await _run(runner, account, store, "[[sim: text mirrored]] keep me ZETA")
    assert not outcome.is_error and outcome.session_id and outcome.mirror_errors == 0
    entries = await store.load(
        {"project_key": project_key_for_directory(default_cwd()), "session_id": outcome.session_id}
    )
    assert entries is not None
    assert any(e.get("type") == "user" and "ZETA" in str(e.get("message")) for e in entries)
    assert (
        await aredis.ttl(store.keys.session_entries(project_key_for_directory(default_cwd()), outcome.session_id)) > 0
    )


async def test_mirror_failure_is_an_event_not_a_failed_run(
    sim: SimulatorServer, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, account = _runner_and_account(sim, settings, tmp_path, monkeypatch)
    outcome, seen = await _run(runner, account, BrokenStore(), "[[sim: text fine]] the store is down")
    assert outcome.got_result and not outcome.is_error
    assert outcome.mirror_errors >= 1
    assert any(e.type == "mirror_error" for e in seen)
