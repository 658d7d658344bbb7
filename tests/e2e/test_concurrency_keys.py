"""Concurrency keys with real workers, the real CLI and the simulator: jobs sharing a key never run at once, while
jobs of another key run beside them; a waiting job is deferred (no worker slot), says why, and goes in priority
order (docs/jobs.md#concurrency-keys)."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e


def _spans(record: JobRecord) -> list[tuple[datetime, datetime]]:
    spans = []
    for attempt in record.attempts:
        assert attempt.finished_at is not None, record.attempts
        spans.append((attempt.started_at, attempt.finished_at))
    return spans


def _overlap(one: tuple[datetime, datetime], two: tuple[datetime, datetime]) -> bool:
    return one[0] < two[1] and two[0] < one[1]


def test_jobs_sharing_a_key_never_overlap_while_another_key_runs_beside_them(
    client: Client, workers: WorkerFactory, unique: str, settings: Settings, redis_client: redis.Redis
) -> None:
    shared = [
        client.submit(prompt=f"[[sim: delay 1.5]] shared {n} {unique}", concurrency_key=f"repo:/a/{unique}")
        for n in range(5)
    ]
    beside = [
        client.submit(prompt=f"[[sim: delay 1.5]] beside {n} {unique}", concurrency_key=f"repo:/b/{unique}")
        for n in range(2)
    ]
    workers(concurrency=4)
    workers(concurrency=4)
    # A waiting job is deferred, in no worker slot, and says what it waits for.
    seen = None
    for _ in range(600):
        waiting = [client.get(j.id) for j in shared]
        seen = next((r for r in waiting if r.status == "deferred"), None)
        if seen is not None or all(r.finished for r in waiting):
            break
        time.sleep(0.05)
    assert seen is not None and seen.wait_reason is not None
    assert seen.wait_reason.startswith(f"waiting for concurrency key 'repo:/a/{unique}': 1 of 1 run(s) hold it")
    records = {j.id: client.wait(j.id, timeout=180, poll_s=0.2) for j in [*shared, *beside]}
    assert all(r.status == "succeeded" for r in records.values()), [(r.status, r.error) for r in records.values()]
    runs = [span for j in shared for span in _spans(records[j.id])]
    assert len(runs) == 5
    assert not any(_overlap(a, b) for i, a in enumerate(runs) for b in runs[i + 1 :]), runs
    # The other key's jobs ran while the first key's did.
    others = [span for j in beside for span in _spans(records[j.id])]
    assert any(_overlap(a, b) for a in others for b in runs), (others, runs)
    # Nothing is left holding or waiting for either key.
    assert not redis_client.keys(f"{settings.key_prefix}ckey:*")


def test_waiters_of_a_key_go_in_priority_order(client: Client, workers: WorkerFactory, unique: str) -> None:
    key = f"repo:/p/{unique}"
    first = client.submit(prompt=f"[[sim: delay 4]] holder {unique}", concurrency_key=key)
    workers(concurrency=4)
    for _ in range(600):  # the holder has its key (its run started) before the others arrive
        if client.get(first.id).attempts:
            break
        time.sleep(0.05)
    late = [client.submit(prompt=f"low {n} {unique}", concurrency_key=key, priority=5) for n in range(2)]
    urgent = client.submit(prompt=f"urgent {unique}", concurrency_key=key, priority=0)
    records = [client.wait(j.id, timeout=180, poll_s=0.2) for j in [first, *late, urgent]]
    assert all(r.status == "succeeded" for r in records)
    starts = {r.id: r.attempts[0].started_at for r in records}
    assert starts[urgent.id] < min(starts[j.id] for j in late), starts  # it came last, it went first
    assert starts[late[0].id] < starts[late[1].id]  # then by age


def test_a_waiter_cancelled_in_line_hands_its_turn_to_the_next(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    key = f"repo:/c/{unique}"
    holder = client.submit(prompt=f"[[sim: delay 4]] holder {unique}", concurrency_key=key)
    workers(concurrency=4, concurrency_recheck_s=900)  # no recheck within the test: only a wake moves the line
    for _ in range(600):
        if client.get(holder.id).attempts:
            break
        time.sleep(0.05)
    dropped = client.submit(prompt=f"dropped {unique}", concurrency_key=key)
    following = client.submit(prompt=f"following {unique}", concurrency_key=key)
    for job in (dropped, following):
        for _ in range(600):
            if client.get(job.id).status == "deferred":
                break
            time.sleep(0.05)
    client.cancel(dropped.id)
    assert client.wait(holder.id, timeout=120, poll_s=0.2).status == "succeeded"
    assert client.wait(dropped.id, timeout=60, poll_s=0.2).status == "cancelled"
    record = client.wait(following.id, timeout=120, poll_s=0.2)
    assert record.status == "succeeded" and record.attempts[0].started_at > client.get(holder.id).attempts[0].started_at


def test_a_key_held_by_a_killed_worker_comes_back_to_the_fleet(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    key = f"repo:/k/{unique}"
    doomed = workers(concurrency=1, concurrency_recheck_s=900)
    holder = client.submit(prompt=f"[[sim: delay 30 times=1]] holder {unique}", concurrency_key=key)
    for _ in range(600):  # the holder's run started on the doomed worker
        if client.get(holder.id).attempts:
            break
        time.sleep(0.05)
    workers(concurrency=2, concurrency_recheck_s=900)
    waiter = client.submit(prompt=f"waiter {unique}", concurrency_key=key)
    for _ in range(600):
        if client.get(waiter.id).status == "deferred":
            break
        time.sleep(0.05)
    assert client.get(waiter.id).wait_reason is not None
    doomed.kill()
    # The holder is recovered and runs again on the live worker, within the key; its end sends the waiter.
    done = client.wait(holder.id, timeout=180, poll_s=0.2)
    assert done.status == "succeeded" and done.attempts[0].outcome == "worker_lost", done.attempts
    record = client.wait(waiter.id, timeout=120, poll_s=0.2)
    assert record.status == "succeeded"
    last = done.attempts[-1]
    assert last.finished_at is not None and record.attempts[0].started_at >= last.finished_at
