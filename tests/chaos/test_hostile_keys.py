"""Hostile input from Redis: keys with unexpected contents — a job key of the wrong type, a record whose status is
not one claudeq knows, a non-numeric finished-jobs counter, an account hash with nonsense in it — are reported, never
crashed on, by the worker, the client, `claudeq list` and the exporter; and a damaged counter stops no job."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.client import Client
from claudeq.worker.metrics.exporter import ClusterCollector
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.tree import ROOT
from tests.support.worker_proc import worker_env

pytestmark = pytest.mark.e2e


def corrupt(redis_client: redis.Redis, settings: Settings, client: Client, unique: str) -> dict[str, str]:
    """Jobs and keys with contents claudeq never writes; -> job id by what is wrong with it."""
    keys = Keys(settings.key_prefix)
    wrong_type = client.submit(prompt=f"wrong type {unique}").id
    unknown_status = client.submit(prompt=f"unknown status {unique}").id
    redis_client.delete(keys.job(wrong_type))
    redis_client.set(keys.job(wrong_type), "a string where a hash belongs")
    redis_client.hset(keys.job(unknown_status), "status", "exploded")
    # The finished-jobs counter the next success bumps (the hour its retention ends), not a number.
    hour = int((time.time() + settings.result_ttl_s) // 3600) + 1
    redis_client.hset(keys.finished_counts("succeeded"), str(hour), "many")
    redis_client.hset(keys.account("a"), mapping={"state": "sideways", "cooldown_until": "soon"})
    return {"wrong_type": wrong_type, "unknown_status": unknown_status}


def test_redis_keys_with_unexpected_contents_are_reported_not_crashed_on(
    client: Client,
    workers: WorkerFactory,
    settings: Settings,
    redis_client: redis.Redis,
    accounts: list,  # type: ignore[type-arg]
    unique: str,
) -> None:
    bad = corrupt(redis_client, settings, client, unique)  # before any worker: their messages wait
    worker = workers()
    run_until(lambda: f"{bad['wrong_type']}" in worker.log(), 60, what="the wrong-type job reported")
    run_until(lambda: f"{bad['unknown_status']}" in worker.log(), 60, what="the unknown-status job reported")

    job = client.submit(prompt=f"a healthy job beside the damage {unique}", account="b")
    assert client.wait(job.id, timeout=120).status == "succeeded"  # a damaged counter stops no claim
    assert worker.alive() and worker.heartbeat_fresh()

    listed = client.list(limit=20)  # the damaged records are listed as unreadable, not raised
    assert any(getattr(r, "job_id", None) == bad["wrong_type"] for r in listed), listed
    env = worker_env(settings, accounts)
    shown = subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", "list"], env=env, cwd=ROOT, capture_output=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr.decode()[-2000:]
    assert "Traceback" not in shown.stderr.decode()

    registry = CollectorRegistry()
    registry.register(ClusterCollector(settings, redis_client))
    scraped = generate_latest(registry).decode()
    assert "claudeq_exporter_redis_up 1.0" in scraped
    assert 'claudeq_jobs{status="succeeded"} 1.0' in scraped
