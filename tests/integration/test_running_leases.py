"""A run's lease is its score in the `running` sorted set (when it expires): the claim sets it, the heartbeat moves
it, a status change drops it, and the reconciler reads only the expired ones — one command however many runs are in
flight. A `running` set left by an earlier claudeq becomes the sorted set as a worker starts. A private
redis-server, so the command counts are ours alone."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.redis_server import command_calls, commands_since, private_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private() -> Iterator[tuple[redis.Redis, Settings]]:
    with private_client() as (client, url):
        yield client, make_settings(url, "leases")


def _claimed(settings: Settings, client: redis.Redis, n: int, ttl_s: float) -> list[str]:
    store = make_worker_store(settings, client)
    ids = []
    for i in range(n):
        job_id, _ = run_call(
            store.create_call(JobRecord(id=f"run-{i}", spec=JobSpec(prompt="x"), status="queued", created_at=utcnow()))
        )
        assert run(store.send(store.claim_call(job_id, "w1", ttl_s))).ok
        ids.append(job_id)
    return ids


def test_the_reconciler_reads_only_the_expired_leases_in_one_command(private: tuple[redis.Redis, Settings]) -> None:
    redis_client, settings = private
    store = make_worker_store(settings, redis_client)
    live = _claimed(settings, redis_client, 50, 60)
    dead = live[:2]
    for job_id in dead:  # their worker stopped beating: the expiry passed
        redis_client.zadd(store.keys.running, {job_id: time.time() - 1})
    run(store.expired_runs())  # warm the connection

    before = command_calls(redis_client)
    expired = run(store.expired_runs())
    cost = commands_since(redis_client, before)

    assert sorted(expired) == sorted(dead)
    assert sum(cost.values()) == 1, cost
    assert [store.lease_alive(job_id) for job_id in live[:3]] == [False, False, True]
    assert run(
        store.send(store.beat_call(live[0], "w1", 1, 30))
    ).ours  # nobody recovered it: its worker's next beat renews it
    assert store.lease_alive(live[0]) and live[0] not in run(store.expired_runs())


def test_a_running_set_of_an_earlier_claudeq_becomes_the_sorted_set(
    settings: Settings, redis_client: redis.Redis
) -> None:
    store = make_worker_store(settings, redis_client)
    redis_client.sadd(store.keys.running, "old-1", "old-2")
    started = time.time()

    assert run(store.upgrade_running(15)) == 2
    assert redis_client.type(store.keys.running) == b"zset"
    expiries = dict(redis_client.zrange(store.keys.running, 0, -1, withscores=True))
    assert set(expiries) == {b"old-1", b"old-2"}
    assert all(started + 14 < expiry < time.time() + 16 for expiry in expiries.values())  # a fresh lease each
    assert run(store.upgrade_running(15)) == 0  # once: a sorted set is left as it is
