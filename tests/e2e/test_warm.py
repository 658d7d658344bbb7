"""Warm CLIs through a real worker process: jobs with distinct secret words never share a request, each keeps its own
session, transcript and usage; a killed worker leaves no warm CLI behind."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.transcripts import RedisSessionStore
from claudeq.worker.run import procs
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until

pytestmark = pytest.mark.e2e

TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def client(settings: Settings) -> Client:
    return Client(settings)


def warm_clis(run_root: Path) -> list[int]:
    """Live warm CLI processes whose config dir is under `run_root` (this test's worker)."""
    found: list[int] = []
    for pid in procs.all_job_pids():
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        run_id = env.get(b"CLAUDEQ_RUN_ID", b"")
        config = env.get(b"CLAUDE_CONFIG_DIR", b"").decode(errors="replace")
        if run_id.startswith(b"warm.") and config.startswith(str(run_root)) and procs.alive(pid):
            found.append(pid)
    return found


def wait_all(client: Client, ids: list[str], timeout: float = 240) -> list[JobRecord]:
    deadline = time.monotonic() + timeout
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        pending = {i for i in pending if run_call(client.store.status_call(i)) not in TERMINAL}
        time.sleep(0.1)
    assert not pending, f"{len(pending)} jobs not finished"
    return [client.get(i) for i in ids]


def warm_flags(client: Client, job_id: str) -> list[bool]:
    return [bool(e.data.get("warm")) for e in client.events(job_id) if e.type == "run_started"]


def test_fifty_jobs_through_warm_clis_never_share_a_request_and_keep_their_own_session_and_usage(
    client: Client, workers: WorkerFactory, simulator: Any, tmp_path: Path
) -> None:
    run_root = tmp_path / "runs"
    workers(warm_clients=2, run_root=run_root)
    words = [f"secretword{secrets.token_hex(5)}" for _ in range(50)]
    sizes = [(20 + 7 * n, 5 + 3 * n) for n in range(50)]
    handles = [
        client.submit(prompt=f"Remember {word}. [[sim: tokens in={tin} out={tout}]]", account="a")
        for word, (tin, tout) in zip(words, sizes, strict=True)
    ]
    records = wait_all(client, [h.id for h in handles])
    assert [r.status for r in records] == ["succeeded"] * 50, [r.error for r in records if r.error]

    warm = [flag for h in handles for flag in warm_flags(client, h.id)]
    assert len(warm) == 50 and sum(warm) >= 25, f"only {sum(warm)} of 50 jobs ran on a warm CLI"

    # No request to the model service carried two jobs' words.
    requests = simulator.requests()
    assert len(requests) >= 50
    for request in requests:
        text = " ".join(m.get("text", "") for m in request["messages"])
        assert len([w for w in words if w in text]) <= 1, text[:500]

    # Each record: its own session, usage equal to what the simulator billed that session, its own transcript.
    sessions = [r.session_id for r in records]
    assert None not in sessions and len(set(sessions)) == 50
    billed = simulator.stats()["sessions"]
    for record, (tin, tout) in zip(records, sizes, strict=True):
        assert record.result is not None and record.session_id is not None
        usage = record.result.usage
        assert (usage.input_tokens, usage.output_tokens) == (tin, tout), record.id
        session = billed[record.session_id]
        assert session["requests"] == 1
        assert (session["tokens"]["input"], session["tokens"]["output"]) == (tin, tout)
        assert usage.cost_usd == pytest.approx(tin * 2e-6 + tout * 1e-5)

    async def transcripts() -> list[str]:
        store = RedisSessionStore.from_settings(client.settings)
        texts: list[str] = []
        try:
            for record in records:
                assert record.session_id is not None
                keys = await store.projects_of(record.session_id)
                assert keys, f"no transcript for {record.session_id}"
                entries = await store.load({"project_key": sorted(keys)[0], "session_id": record.session_id})
                texts.append(str(entries or []))
        finally:
            await store.aclose()
        return texts

    for transcript, word in zip(asyncio.run(transcripts()), words, strict=True):
        assert [w for w in words if w in transcript] == [word]


def test_sigkill_of_the_worker_leaves_no_warm_cli(
    client: Client, workers: WorkerFactory, tmp_path: Path, redis_client: redis.Redis
) -> None:
    run_root = tmp_path / "runs"
    worker = workers(warm_clients=2, run_root=run_root)
    ids = [client.submit(prompt=f"warm me {n}", account="a").id for n in range(3)]
    records = wait_all(client, ids)
    assert all(r.status == "succeeded" for r in records)
    idle = run_until(lambda: warm_clis(run_root), 10, what="an idle warm CLI")
    # An idle CLI holds no account slot.
    assert redis_client.zcard(Keys(client.settings.key_prefix).account_slots("a")) == 0
    worker.kill()
    run_until(lambda: not any(procs.alive(pid) for pid in idle) and not warm_clis(run_root), 5, what="warm CLIs gone")
