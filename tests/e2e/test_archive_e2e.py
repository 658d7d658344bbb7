"""End to end: with a transcript archive (the machine's PostgreSQL), real `claudeq-worker` processes move a finished
job's transcript and events off Redis after `archive_after_s`; `claudeq transcript`, `events` and `status` show
the same, and the conversation's next turn, on another worker, resumes the archived session."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.archive import open_archive
from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.archive import postgres_url
from tests.support.run_dirs import group_workspace, open_base

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62502  # the runs' shared group: a root worker runs file tools under a uid of their own


def session_keys(redis_client: redis.Redis, prefix: str) -> list[bytes]:
    found = redis_client.scan_iter(match=f"{prefix}session*", count=1000)
    return [k for k in found if b"session-tenant:" not in k]


def test_a_finished_turn_moves_to_the_archive_and_the_next_turn_resumes_it(
    workers: WorkerFactory,
    settings: Settings,
    redis_client: redis.Redis,
    simulator: Any,
    tmp_path: Path,
    unique: str,
) -> None:
    cfg = settings.model_copy(update={"archive_url": postgres_url(), "archive_after_s": 0})
    archive = open_archive(cfg.archive_url)
    assert archive is not None
    with open_base("cqt-archive-") as base:
        workspace = group_workspace(base / "ws", WORKSPACE_GID)
        policy = cfg.policy.model_copy(update={"workspace_roots": [workspace], "run_groups": [WORKSPACE_GID]})
        cfg = cfg.model_copy(update={"policy": policy})  # the producer checks cwd against the same roots
        client = Client(cfg, redis_client=redis_client)
        try:
            run(client, cfg, workers, policy, workspace, base, redis_client, simulator, unique)
        finally:
            archive.drop(cfg.key_prefix)


def run(
    client: Client,
    cfg: Settings,
    workers: WorkerFactory,
    policy: Any,
    workspace: Path,
    base: Path,
    redis_client: redis.Redis,
    simulator: Any,
    unique: str,
) -> None:
    archive = client.store.archive
    assert archive is not None and cfg.archive_url
    notes = workspace / "notes.txt"
    notes.write_text(f"the secret word is KAPPA-{unique}\n" * 20)
    worker_a = workers(run_root=base / "root-a", archive_url=cfg.archive_url, archive_after_s=0, policy=policy)
    read = json.dumps({"file_path": str(notes)})
    first = client.submit(
        prompt=f"[[sim: tool Read {read}]] read the notes ALPHA-{unique}",
        tools="read-only",
        cwd=str(workspace),
        conversation=unique,
    )
    one = client.wait(first.id, timeout=120)
    assert one.status == "succeeded", one.error
    assert one.session_id
    events_before = list(client.events(first.id))
    transcript = client.transcript(first.id)

    key = client.store.keys.job(first.id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        redis_client.hget(key, "archived") != b"1" or session_keys(redis_client, cfg.key_prefix)
    ):
        time.sleep(0.5)
    assert redis_client.hget(key, "archived") == b"1" and not redis_client.hexists(key, "events")
    assert session_keys(redis_client, cfg.key_prefix) == []  # the transcript left Redis
    assert archive.get_session(cfg.key_prefix, archive.projects_of(cfg.key_prefix, one.session_id)[0], one.session_id)
    assert list(client.events(first.id)) == events_before
    assert client.get(first.id) == one
    assert client.transcript(first.id) == transcript  # `claudeq transcript` reads it from the archive
    [(session_id, entries)] = transcript
    assert session_id == one.session_id
    assert any(f"KAPPA-{unique}" in json.dumps(e) for e in entries)  # the tool result is in it
    weight = int(redis_client.memory_usage(key, samples=0) or 0)
    assert weight < 4096, weight

    # The next turn, on another worker with nothing on its disk, resumes the archived session.
    worker_a.stop()
    workers(run_root=base / "root-b", archive_url=cfg.archive_url, archive_after_s=3600, policy=policy)
    second = client.submit(prompt=f"what was the word BETA-{unique}", cwd=str(workspace), conversation=unique)
    two = client.wait(second.id, timeout=120)
    assert two.status == "succeeded", two.error
    plan = next(e for e in client.events(second.id) if e.type == "session_plan")
    assert plan.data["mode"] == "resume" and plan.data["resume"] == one.session_id
    request = [r for r in simulator.requests() if r.get("session_id") == two.session_id and r.get("kind") == "main"][-1]
    said = json.dumps(request["messages"])
    assert f"ALPHA-{unique}" in said and f"KAPPA-{unique}" in said and f"BETA-{unique}" in said
