"""The fleet behind Sentinel (docs/failover.md): a primary, a replica and three `redis-server --sentinel`
processes on loopback, real `claudeq-worker` processes (state store, loop client and the kombu broker all through
the sentinels), the real CLI and the simulator. The primary is SIGKILLed mid-load: the sentinels promote the
replica, and the same producer `Client` and the same workers carry on against it without a restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq import connections
from claudeq.config.settings import Settings
from claudeq.errors import NotReplicated
from claudeq.models import TERMINAL
from claudeq.producer.client import Client, JobHandle
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.sentinel import MASTER_NAME, SentinelGroup
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e

#: How long the sentinels wait before they call the primary down (ms).
DOWN_AFTER_MS = 1000


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    made = SentinelGroup(down_after_ms=DOWN_AFTER_MS)
    yield made
    made.stop()


@pytest.fixture
def settings(group: SentinelGroup, unique: str, accounts_file: Path) -> Settings:
    return make_settings(
        group.primary.url,
        unique,
        accounts_file=accounts_file,
        redis_sentinels=group.sentinels_setting,
        redis_master_name=MASTER_NAME,
        **FAST_E2E,
    )


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    """A client of whichever node is the primary (the servers are this test's own: nothing to clean up)."""
    client = connections.sync_client(settings, socket_timeout=2, socket_connect_timeout=2)
    yield client
    client.close()


@pytest.fixture
def client(settings: Settings, redis_client: redis.Redis) -> Client:
    return Client(settings)


def submit_through(client: Client, prompt: str, deadline_s: float = 30) -> tuple[JobHandle, int]:
    """Submit, retrying while the primary is gone (what a producer does with a RedisError); -> (job, failed tries)."""
    deadline = time.monotonic() + deadline_s
    failures = 0
    while True:
        try:
            return client.submit(prompt=prompt), failures
        except redis.RedisError:
            failures += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_fleet_runs_jobs_again_after_the_primary_is_killed(
    group: SentinelGroup, client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    workers()
    workers()
    before = [client.submit(prompt=f"[[sim: text before-{i}]] warm up") for i in range(4)]
    assert all(client.wait(job.id, timeout=120, poll_s=0.1).status == "succeeded" for job in before)

    group.primary.client().execute_command("WAIT", 1, 2000)  # what was acknowledged so far is on the replica
    old_port = group.primary.port
    killed_at, killed_wall = time.monotonic(), time.time()
    group.primary.kill()
    failover_s = group.wait_failover(old_port)

    submitted = [submit_through(client, f"[[sim: text after-{i}]] after") for i in range(6)]
    after = [job for job, _ in submitted]
    refused = sum(tries for _, tries in submitted)
    first_submit_s = time.monotonic() - killed_at
    records = [client.wait(job.id, timeout=120, poll_s=0.1) for job in after]
    running_again_s = min(r.finished_at.timestamp() for r in records if r.finished_at) - killed_wall
    print(
        f"\nfailover: sentinels promoted the replica {failover_s:.2f} s after the SIGKILL "
        f"(down-after-milliseconds {DOWN_AFTER_MS}); first submit returned at {first_submit_s:.2f} s "
        f"({refused} refused tries); first job after it finished at {running_again_s:.2f} s"
    )
    assert [r.status for r in records] == ["succeeded"] * len(records)
    assert [r.result.text for r in records if r.result] == [f"after-{i}" for i in range(6)]
    # The jobs acknowledged before the kill are on the new primary, finished once.
    for job in before:
        record = client.get(job.id)
        assert record.status in TERMINAL and record.status == "succeeded"
        assert len(record.attempts) == 1
    assert running_again_s < DOWN_AFTER_MS / 1000 + 15


#: Jobs of the chaos scenario, and after how many submits the primary is killed.
CHAOS_JOBS = 200
KILL_AFTER = 60


def marker(i: int) -> str:
    return f"chaos-{i:03d}-end"


def test_200_jobs_through_a_primary_killed_mid_load_each_end_once(
    group: SentinelGroup, workers: WorkerFactory, settings: Settings, simulator: Any, accounts: list[SimAccount]
) -> None:
    """Submits go on while the primary is SIGKILLed (each retried with its idempotency key until it returns, with
    `redis_wait_replicas = 1`: a returned submit is on a replica); the killed node comes back and the sentinels
    make it the new primary's replica. Every job whose submit returned succeeds exactly once in its record, the
    simulator saw each job run (twice only where a run was in flight at the kill), and no account ran more at once
    than its concurrency."""
    durable = settings.model_copy(update={"redis_wait_replicas": 1, "redis_wait_timeout_ms": 500})
    workers()
    workers()
    client = Client(durable)
    returned: dict[int, str] = {}
    submitted_after_failover: set[int] = set()
    killed = threading.Event()
    failed_over = threading.Event()
    refused = 0

    def submit_all() -> None:
        nonlocal refused
        for i in range(CHAOS_JOBS):
            if i == KILL_AFTER:
                killed.set()
            deadline = time.monotonic() + 60
            while True:
                try:
                    job = client.submit(prompt=f"[[sim: text {marker(i)}]] job {marker(i)}", idempotency_key=marker(i))
                    break
                except (NotReplicated, redis.RedisError):
                    refused += 1
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.2)
            returned[i] = job.id
            if failed_over.is_set():
                submitted_after_failover.add(i)

    submitter = threading.Thread(target=submit_all, name="chaos-submitter")
    submitter.start()
    assert killed.wait(120)
    old_port = group.primary.port
    killed_wall = time.time()
    group.primary.kill()
    failover_s = group.wait_failover(old_port)
    failed_over.set()
    new_port = group.primary_port()
    assert new_port is not None and new_port != old_port
    # Back as the new primary's replica, never promoted: it comes back empty, and promoted before its first sync
    # completed (a second failover while the loaded machine stalls the new primary) it would drop what was kept.
    group.primary.rejoin(new_port)
    submitter.join(300)
    assert not submitter.is_alive()
    assert len(returned) == CHAOS_JOBS, f"{CHAOS_JOBS - len(returned)} submits never returned"

    records = {i: client.wait(job_id, timeout=300, poll_s=0.2) for i, job_id in returned.items()}
    after_kill = [r.finished_at.timestamp() - killed_wall for r in records.values() if r.finished_at]
    running_again_s = min(t for t in after_kill if t > 0)
    assert {r.status for r in records.values()} == {"succeeded"}
    assert all([a.outcome for a in r.attempts].count("success") == 1 for r in records.values())
    assert all(r.result is not None and r.result.text == marker(i) for i, r in records.items())

    runs: dict[int, int] = {}
    for entry in simulator.requests():
        if entry.get("kind") != "main" or entry.get("outcome") != "ok":
            continue
        text = " ".join(str(m.get("text", "")) for m in entry.get("messages", []))
        for i in range(CHAOS_JOBS):
            if marker(i) in text:
                runs[i] = runs.get(i, 0) + 1
                break
    assert set(runs) == set(range(CHAOS_JOBS))  # every job ran
    twice = sorted(i for i, n in runs.items() if n > 1)
    print(
        f"\nchaos: {CHAOS_JOBS} jobs, primary SIGKILLed after {KILL_AFTER} submits; sentinels promoted the replica "
        f"after {failover_s:.2f} s (down-after-milliseconds {DOWN_AFTER_MS}); first job finished after the kill "
        f"at {running_again_s:.2f} s; {refused} submit tries refused while the primary was away; "
        f"{len(twice)} job(s) in flight at the kill ran again"
    )
    assert all(runs[i] == 1 for i in submitted_after_failover)  # no job that started after the failover ran twice
    assert len(twice) <= 4 * len(accounts), twice  # only what was in flight at the kill ran again
    # The records agree with the simulator: only jobs in flight at the kill were tried again. (A job the simulator
    # ran once may still have two attempts: its first attempt lost the primary before its CLI's request went out.)
    retried = sorted(i for i, r in records.items() if len(r.attempts) > 1)
    assert len(retried) <= 4 * len(accounts), retried
    assert all(i not in submitted_after_failover for i in retried), retried
    # An account that took no request (cache affinity may keep every job on one) is absent from the stats.
    seen = simulator.stats()["accounts"]
    assert seen and set(seen) <= {a.name for a in accounts}, seen
    for account in accounts:
        in_flight = seen.get(account.name, {"max_in_flight": 0})["max_in_flight"]
        assert in_flight <= account.max_concurrency, (account.name, in_flight)
    assert running_again_s < DOWN_AFTER_MS / 1000 + 15
