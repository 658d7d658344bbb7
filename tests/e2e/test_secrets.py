"""Secrets of every shape stay out of what the worker stores and shows, on a password-protected Redis.

The token-shape pattern (`sk-ant-…`) catches Anthropic tokens by itself, so these tests use secrets it cannot
recognise: the Redis password, the value of a CLAUDEQ_SECRET_ENV variable and an API key without the usual prefix.
Only the secrets the worker learned from its settings keep them out. A job reads a file holding all of them with
the real CLI (the simulator's tool directive), so they pass through tool results, the final text and the mirrored
transcript; none may reach Redis (records, events, transcripts), a worker log or /metrics.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from claude_agent_sdk import project_key_for_directory
from prometheus_client import CollectorRegistry, generate_latest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.keys import Keys
from claudeq.producer.client import Client
from claudeq.transcripts import decode
from claudeq.worker.metrics.exporter import ClusterCollector
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory, assert_no_secrets
from tests.integration.test_prometheus import free_port
from tests.support.redis_server import PrivateRedis
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e

#: Secrets no pattern recognises (fresh per run); each is one the worker can only know from its settings.
REDIS_PASSWORD = f"rpw{uuid.uuid4().hex[:20]}"
EXTRA_SECRET = f"xsec{uuid.uuid4().hex[:20]}"
PLAIN_API_KEY = f"plainkey{uuid.uuid4().hex[:24]}"
EXTRA_VAR = "CQT_EXTRA_SECRET"
SECRETS = (REDIS_PASSWORD, EXTRA_SECRET, PLAIN_API_KEY)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A private redis-server started with --requirepass: every client, worker and the broker use the password."""
    server = PrivateRedis(password=REDIS_PASSWORD)
    try:
        assert REDIS_PASSWORD in server.url
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def accounts() -> list[SimAccount]:
    """One API-key account whose key has no recognisable prefix (and one ordinary OAuth account)."""
    return [SimAccount("plain", kind="api_key", token=PLAIN_API_KEY), SimAccount("oauth")]


WORKSPACE_GID = 62502  # the runs' shared group: a root worker runs file tools under a uid of their own


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace the runs' own uids reach through their group (pytest's tmp_path is under a 0700 directory)."""
    with open_base("cqt-secrets-") as base:
        yield group_workspace(base / "ws", WORKSPACE_GID)


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, workspace: Path) -> Settings:
    policy = WorkerPolicy(workspace_roots=[workspace], run_groups=[WORKSPACE_GID])
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, secret_env=[EXTRA_VAR], policy=policy, **FAST_E2E
    )


def notes_file(workspace: Path, marker: str) -> Path:
    """A file in the workspace holding every secret, next to a harmless marker that must come through."""
    path = workspace / "notes.txt"
    path.write_text(
        f"marker {marker}\nredis password {REDIS_PASSWORD}\nextra {EXTRA_SECRET}\napi key {PLAIN_API_KEY}\n"
    )
    return path


def read_job(client: Client, workspace: Path, marker: str, account: str) -> str:
    notes = notes_file(workspace, marker)
    directive = json.dumps({"file_path": str(notes)})
    job = client.submit(
        prompt=f"[[sim: tool Read {directive}]] read the notes {marker}",
        tools="read-only",
        cwd=str(workspace),
        account=account,
    )
    return job.id


def transcript_entries(redis_client: redis.Redis, settings: Settings, cwd: Path, session_id: str) -> list[bytes]:
    key = Keys(settings.key_prefix).session_entries(project_key_for_directory(str(cwd)), session_id)
    # Stored compressed (claudeq/transcripts/_codec.py): the entries as the store loads them, one JSON text each.
    return [json.dumps(e, ensure_ascii=False).encode() for e in decode(redis_client.lrange(key, 0, -1))]


def test_secrets_of_other_shapes_never_reach_redis_logs_or_metrics(
    client: Client,
    workers: WorkerFactory,
    settings: Settings,
    accounts: list[SimAccount],
    workspace: Path,
    redis_client: redis.Redis,
    unique: str,
) -> None:
    port = free_port()
    worker = workers(metrics_port=port, extra_env={EXTRA_VAR: EXTRA_SECRET})
    marker = f"marker-{unique}"
    job_id = read_job(client, workspace, marker, account="plain")
    record = client.wait(job_id, timeout=90, poll_s=0.1)
    assert record.status == "succeeded", record.error
    assert record.account == "plain"

    # The file's text did pass through the run: the marker is in the tool result, the final text and the transcript.
    results = [e for e in client.events(job_id) if e.type == "tool_result"]
    assert results and not results[0].data["is_error"], results
    assert marker in str(results[0].data["text"])
    assert record.result is not None and marker in (record.result.text or "")
    assert record.session_id
    entries = transcript_entries(redis_client, settings, workspace, record.session_id)
    assert any(marker.encode() in entry for entry in entries), "the mirrored transcript lacks the tool result"

    public = json.dumps(record.public())
    events = json.dumps([e.model_dump(mode="json") for e in client.events(job_id)])
    worker_metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    registry = CollectorRegistry()
    registry.register(ClusterCollector(settings, redis_client))
    exporter_metrics = generate_latest(registry).decode()
    assert "claudeq_exporter_redis_up 1.0" in exporter_metrics
    worker.stop()
    tokens = [a.token_value for a in accounts]
    for secret in (*SECRETS, *tokens):
        assert secret not in public, "a secret in the job record"
        assert secret not in events, "a secret in the job's events"
        assert secret not in worker_metrics, "a secret on the worker's /metrics"
        assert secret not in exporter_metrics, "a secret on the exporter's /metrics"
    assert_no_secrets(redis_client, settings, accounts, [worker.log()], extra=SECRETS)


def test_mirrored_transcript_keeps_no_copy_of_a_secret_the_run_saw(
    client: Client, workers: WorkerFactory, settings: Settings, workspace: Path, redis_client: redis.Redis, unique: str
) -> None:
    workers(extra_env={EXTRA_VAR: EXTRA_SECRET})
    marker = f"marker-{unique}"
    job_id = read_job(client, workspace, marker, account="oauth")
    record = client.wait(job_id, timeout=90, poll_s=0.1)
    assert record.status == "succeeded", record.error
    assert record.session_id
    entries = transcript_entries(redis_client, settings, workspace, record.session_id)
    mirrored = b"\n".join(entries)
    assert marker.encode() in mirrored, "the tool result never reached the mirrored transcript"
    for secret in SECRETS:
        assert secret.encode() not in mirrored, "a secret the run read is in the mirrored transcript"
