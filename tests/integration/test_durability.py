"""What `CLAUDEQ_REDIS_WAIT_REPLICAS` promises (docs/failover.md#durability), on a real primary, replica and three
sentinels on loopback: a submit returns only once a replica holds the job, `wait` reports an end only once a
replica holds it, and a primary cut off from its replica and the sentinels accepts no submit that is then lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.errors import JobNotFound, JobTimeout, NotReplicated
from claudeq.jobs import JobStore
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.conftest import make_settings
from tests.support.sentinel import MASTER_NAME, SentinelGroup


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    made = SentinelGroup(down_after_ms=1000, min_replicas_to_write=1, partitionable=True)
    yield made
    made.stop()


@pytest.fixture
def settings(group: SentinelGroup, unique: str) -> Settings:
    return make_settings(
        group.primary.url,
        unique,
        redis_sentinels=group.sentinels_setting,
        redis_master_name=MASTER_NAME,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=500,
    )


def on_replica(group: SentinelGroup, settings: Settings, job_id: str) -> bool:
    """Whether the replica itself holds the job's record (read there, not through the primary)."""
    store = JobStore.for_settings(settings, group.replica.client())
    try:
        run_call(store.get_call(job_id))
    except JobNotFound:
        return False
    return True


def test_a_submit_returns_once_a_replica_holds_the_job(group: SentinelGroup, settings: Settings) -> None:
    client = Client(settings)
    jobs = [client.submit(prompt=f"job {i}") for i in range(20)]
    # Read at once, no waiting: WAIT already made sure.
    assert all(on_replica(group, settings, job.id) for job in jobs)
    batch = client.submit_many([{"prompt": f"batch {i}"} for i in range(50)])
    assert all(on_replica(group, settings, job.id) for job in batch)


def test_a_submit_no_replica_confirms_raises_naming_the_job_and_resubmits_safely(
    group: SentinelGroup, settings: Settings
) -> None:
    client = Client(settings)
    group.replica.pause()
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated) as raised:
            client.submit(prompt="while the replica is away", idempotency_key="away-1")
        assert time.monotonic() - started < 5
        assert raised.value.acked == 0 and raised.value.wanted == 1 and len(raised.value.job_ids) == 1
        assert raised.value.job_ids[0] in str(raised.value)
    finally:
        group.replica.resume()
    again = client.submit(prompt="while the replica is away", idempotency_key="away-1")
    assert again.id == raised.value.job_ids[0] and not again.created  # one job, whichever way it went
    assert on_replica(group, settings, again.id)


def test_wait_reports_an_end_only_once_a_replica_holds_it(group: SentinelGroup, settings: Settings) -> None:
    client = Client(settings)
    job = client.submit(prompt="to cancel")
    group.replica.pause()
    try:
        assert client.cancel(job.id) == "cancelled"
        with pytest.raises(JobTimeout):
            client.wait(job.id, timeout=1.5, poll_s=0.1)  # the end is on the primary only: not reported
    finally:
        group.replica.resume()
    assert client.wait(job.id, timeout=10, poll_s=0.1).status == "cancelled"


def test_a_partitioned_primary_accepts_no_submit_that_is_lost(group: SentinelGroup, settings: Settings) -> None:
    """A producer that still talks to the old primary directly (not through the sentinels) keeps submitting while
    the primary is cut off from its replica and the sentinels. Every submit either raises or returns; after the
    failover every one that returned is on the new primary."""
    direct = Client(settings.model_copy(update={"redis_sentinels": ""}))  # the old primary's own address
    assert direct.submit(prompt="before").id
    old = group.monitored_port
    group.partition()
    returned: list[str] = []
    refused: list[str] = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        try:
            returned.append(direct.submit(prompt="during the partition").id)
        except (NotReplicated, redis.RedisError) as exc:
            refused.append(type(exc).__name__)
        time.sleep(0.05)
    failover_s = group.wait_failover(old)
    print(
        f"\npartition: {len(returned)} submits returned, {len(refused)} refused ({set(refused)}); "
        f"failover after {failover_s:.2f} s"
    )
    assert refused  # the old primary stopped taking work
    assert "NotReplicated" in refused  # the submits it did take before min-replicas-to-write cut in
    survivors = Client(settings)  # through the sentinels: the new primary
    assert survivors.store.redis.info("replication")["role"] == "master"
    for job_id in returned:
        assert survivors.get(job_id).status == "queued"


def test_a_followed_job_shows_its_end_only_once_a_replica_holds_it(group: SentinelGroup, settings: Settings) -> None:
    client = Client(settings)
    job = client.submit(prompt="to cancel while followed")
    seen: list[tuple[str, float]] = []

    def follow() -> None:
        for event in client.events(job.id, follow=True):
            seen.append((event.type, time.monotonic()))

    group.replica.pause()
    follower = threading.Thread(target=follow)
    try:
        follower.start()
        assert client.cancel(job.id) == "cancelled"
        time.sleep(1.5)
        assert "cancelled" not in [t for t, _ in seen]  # on the primary only: not shown yet
        resumed = time.monotonic()
    finally:
        group.replica.resume()
    follower.join(15)
    assert not follower.is_alive()
    end = [at for t, at in seen if t == "cancelled"]
    assert end and end[0] >= resumed
