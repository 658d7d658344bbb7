"""What a worker puts in the broker, with the real Celery producer of `build_runtime` on the real Redis.

A deferred job waits in the deferred set, never in the broker with an ETA/countdown (a countdown holds the message
inside some worker, where it is invisible to the fleet and lost with that worker); when it is promoted, its message
goes out at once, with the job's priority and no ETA. No worker consumes the test's queue, so each message can be
read where it lands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.broker import KOMBU_PRIORITY_SEP, job_id_of, pending_job_ids, queue_lists
from claudeq.config.settings import Settings
from claudeq.models import JobSpec
from claudeq.producer.client import Client
from claudeq.worker.app import WorkerRuntime, build_runtime
from tests.conftest import make_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(redis_url: str, unique: str, tmp_path: Path) -> Settings:
    """One account with one slot; long loop periods, so only the test promotes or re-sends anything."""
    accounts = tmp_path / "accounts.toml"
    accounts.write_text('[[accounts]]\nname = "only"\nkind = "oauth"\ntoken_env = "CQT_UNUSED"\nmax_concurrency = 1\n')
    return make_settings(redis_url, unique, accounts_file=accounts, loop_interval_s=3600, unclaimed_resend_s=3600)


@pytest.fixture
def runtime(settings: Settings, redis_client: redis.Redis) -> Iterator[WorkerRuntime]:
    rt = build_runtime(settings, worker_id=f"broker-test-{settings.key_prefix}")
    rt.engine.start()
    yield rt
    rt.engine.stop()


def messages(client: redis.Redis, queue: str) -> dict[str, list[dict[str, Any]]]:
    """Every message waiting on the queue, by the Redis list (priority step) it sits in."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name in queue_lists(queue):
        raw = client.lrange(name, 0, -1)
        if raw:
            found[name] = [json.loads(m) for m in raw]
    return found


def assert_sent_now(message: dict[str, Any], job_id: str) -> None:
    headers = message["headers"]
    assert job_id_of(json.dumps(message)) == job_id
    assert headers.get("eta") is None, f"sent with an ETA/countdown: {headers.get('eta')}"
    assert headers.get("countdown") is None and headers.get("expires") is None, headers


def test_deferred_job_is_not_in_the_broker_and_its_promotion_is_sent_at_once_with_its_priority(
    client: Client, runtime: WorkerRuntime, settings: Settings, redis_client: redis.Redis
) -> None:
    queue = settings.queue
    engine = runtime.engine
    holder = engine.call(engine.accounts.acquire("holder-job", JobSpec(prompt="holds the only slot"))).result(
        timeout=30
    )
    assert not hasattr(holder, "ready_at"), holder  # a SlotLease, not NoAccount

    job = client.submit(prompt="wait for a slot", priority=9)
    submitted = messages(redis_client, queue)
    assert list(submitted) == [f"{queue}{KOMBU_PRIORITY_SEP}9"], submitted  # the producer routes by priority
    assert_sent_now(submitted[f"{queue}{KOMBU_PRIORITY_SEP}9"][0], job.id)
    for name in queue_lists(queue):  # a worker took the message ...
        redis_client.delete(name)

    assert engine.deliver_blocking(job.id).outcome == "deferred"  # ... and found no free slot
    record = client.get(job.id)
    assert record.status == "deferred" and record.ready_at is not None
    assert "deferred" in [e.type for e in client.events(job.id)]
    assert messages(redis_client, queue) == {}, "a deferred job must not wait in the broker"
    assert pending_job_ids(redis_client, [queue]) == set()

    waiters = engine.call(engine.accounts.release(holder)).result(
        timeout=30
    )  # the slot frees: it is handed to the waiter, now queued
    assert waiters == [job.id]
    assert client.get(job.id).status == "queued"
    engine.call(engine.dispatch.send_admitted(waiters)).result(30)
    promoted = messages(redis_client, queue)
    assert list(promoted) == [f"{queue}{KOMBU_PRIORITY_SEP}9"], promoted  # still priority 9
    assert len(promoted[f"{queue}{KOMBU_PRIORITY_SEP}9"]) == 1
    assert_sent_now(promoted[f"{queue}{KOMBU_PRIORITY_SEP}9"][0], job.id)
    assert client.get(job.id).status == "queued"


def test_promoter_loop_sends_a_due_deferred_job_at_once(
    client: Client, runtime: WorkerRuntime, settings: Settings, redis_client: redis.Redis
) -> None:
    engine = runtime.engine
    holder = engine.call(engine.accounts.acquire("holder-job", JobSpec(prompt="holds the only slot"))).result(
        timeout=30
    )
    job = client.submit(prompt="wait for a slot", priority=0)
    for name in queue_lists(settings.queue):
        redis_client.delete(name)
    assert engine.deliver_blocking(job.id).outcome == "deferred"
    redis_client.delete(engine.store.keys.account_waiters("only"))  # out of line: its ready time brings it back
    assert engine.call(engine.accounts.release(holder)).result(timeout=30) == []
    redis_client.zadd(engine.store.keys.deferred, {job.id: 0})  # due now
    assert engine.call(runtime.loops.promote_once()).result(30) >= 1
    promoted = messages(redis_client, settings.queue)
    assert list(promoted) == [settings.queue], promoted  # priority 0 sits in the queue's own list
    assert_sent_now(promoted[settings.queue][0], job.id)
