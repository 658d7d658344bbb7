"""Priority end to end: on a busy worker, a priority-0 job queued behind priority-9 jobs runs first."""

from __future__ import annotations

import pytest

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until

pytestmark = pytest.mark.e2e


def test_priority_zero_overtakes_priority_nine_jobs_queued_before_it(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    workers(concurrency=1)
    busy = client.submit(prompt=f"[[sim: stall 6]] keep the worker busy {unique}", idle_timeout_s=60)
    run_until(lambda: claude_pids([busy.id]), 60, what="the busy job's CLI")
    late = [client.submit(prompt=f"[[sim: text low]] low {i} {unique}", priority=9) for i in range(3)]
    urgent = client.submit(prompt=f"[[sim: text high]] high {unique}", priority=0)
    # Everything was queued while the only slot was taken, or the order below would prove nothing.
    assert client.get(busy.id).status == "running"
    assert all(client.get(j.id).status == "queued" for j in [*late, urgent])

    records = {j.id: client.wait(j.id, timeout=120, poll_s=0.2) for j in [busy, *late, urgent]}
    assert all(r.status == "succeeded" for r in records.values()), {k: r.error for k, r in records.items()}
    started = sorted([*late, urgent], key=lambda j: records[j.id].attempts[0].started_at or records[j.id].created_at)
    assert started[0].id == urgent.id, [records[j.id].spec.priority for j in started]
    assert [records[j.id].spec.priority for j in started] == [0, 9, 9, 9]
