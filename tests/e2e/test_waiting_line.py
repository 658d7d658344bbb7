"""The waiting line end to end: jobs waiting for an account slot get it in priority order, then age, fleet-wide.

One account with one slot and two worker processes at the end-to-end tests' 3 s lease: every job that cannot run
waits deferred in the account's line, for several lease TTLs. A priority-0 job that joined the line last still gets
the next slot before the priority-9 jobs waiting before it, the priority-9 jobs follow in submit order, and no
waiter goes back through the broker while it waits (one `deferred` event each: a slot is handed to it).
"""

from __future__ import annotations

import time

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until
from tests.support.worker_proc import SimAccount

pytestmark = pytest.mark.e2e


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("scarce", max_concurrency=1)]


def test_a_priority_zero_job_gets_the_next_slot_before_priority_nine_jobs_waiting_longer(
    client: Client, workers: WorkerFactory, unique: str, settings: Settings, redis_client: redis.Redis
) -> None:
    workers(concurrency=3)
    workers(concurrency=3)
    # The waiters wait several lease TTLs (3 s): long enough for any re-send at a lease-TTL fallback to show.
    busy = client.submit(prompt=f"[[sim: stall 15]] hold the only slot {unique}", idle_timeout_s=60)
    run_until(lambda: claude_pids([busy.id]), 60, what="the busy job's CLI")
    line = Keys(settings.key_prefix).account_waiters("scarce")
    bulk = []
    for i in range(3):
        bulk.append(client.submit(prompt=f"[[sim: text bulk]] bulk {i} {unique}", priority=9))
        run_until(lambda n=i + 1: redis_client.zcard(line) == n, 30, what=f"{i + 1} bulk jobs in line")
    urgent = client.submit(prompt=f"[[sim: text urgent]] urgent {unique}", priority=0)
    run_until(lambda: redis_client.zcard(line) == 4, 30, what="the urgent job in line")
    # Everything waited while the only slot was taken, or the order below would prove nothing.
    assert client.get(busy.id).status == "running"
    assert all(client.get(j.id).status == "deferred" for j in [*bulk, urgent])
    assert [m.decode() for m in redis_client.zrange(line, 0, -1)] == [urgent.id, *(j.id for j in bulk)]
    time.sleep(2 * settings.lease_ttl_s)  # in line past the lease TTL: still deferred, still in line, never re-sent
    assert client.get(busy.id).status == "running"
    assert all(client.get(j.id).status == "deferred" for j in [*bulk, urgent])
    assert redis_client.zcard(line) == 4
    deferrals = {j.id: [e.type for e in client.events(j.id)].count("deferred") for j in [*bulk, urgent]}
    assert deferrals == {j.id: 1 for j in [*bulk, urgent]}  # joined the line once, never re-sent while waiting

    records = {j.id: client.wait(j.id, timeout=120, poll_s=0.2) for j in [busy, *bulk, urgent]}
    assert all(r.status == "succeeded" for r in records.values()), {k: r.error for k, r in records.items()}
    ran = [a for j in [*bulk, urgent] for a in records[j.id].attempts if a.outcome == "success"]
    started = sorted(ran, key=lambda a: a.started_at)
    order = [next(j.id for j in [*bulk, urgent] if a in records[j.id].attempts) for a in started]
    assert order == [urgent.id, *(j.id for j in bulk)]
    deferrals = {j.id: [e.type for e in client.events(j.id)].count("deferred") for j in [*bulk, urgent]}
    assert deferrals == {j.id: 1 for j in [*bulk, urgent]}  # each was handed its slot, never re-sent
