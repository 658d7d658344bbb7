"""Graceful drain with several runs in flight: SIGTERM lets the runs that end within the grace period finish where
they are; the others are handed back (attempt `requeued`, free) and finish on another worker. None is lost, none
completes twice, and the simulator never sees two runs of one job at once.

(tests/e2e/test_engine_lifecycle.py covers one run at a time: a short run finishing inside the grace, a second
SIGTERM requeueing at once.)"""

from __future__ import annotations

from typing import Any

import pytest

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until

pytestmark = pytest.mark.e2e


def requests_of(simulator: Any, marker: str) -> list[dict[str, Any]]:
    return [e for e in simulator.requests() if any(marker in str(m.get("text")) for m in e.get("messages", []))]


def overlapping(entries: list[dict[str, Any]]) -> bool:
    busy_until = 0.0
    for entry in sorted(entries, key=lambda e: e["time"]):
        if entry["time"] < busy_until:
            return True
        busy_until = max(busy_until, entry.get("ended", float("inf")))
    return False


def test_sigterm_drains_short_runs_in_place_and_hands_long_ones_to_another_worker(
    client: Client, workers: WorkerFactory, simulator: Any, unique: str
) -> None:
    # Leases of 10 s: a worker starved of CPU on a loaded machine keeps its runs (this test is about the drain).
    draining = workers(concurrency=4, shutdown_grace_s=8, lease_ttl_s=10, wait=False)
    draining.wait_ready(120)
    short = [f"short-{unique}-{i}" for i in range(2)]
    long = [f"long-{unique}-{i}" for i in range(2)]
    jobs = {m: client.submit(prompt=f"[[sim: stall 3]] {m}", idle_timeout_s=120).id for m in short}
    # The long runs stall only on their first request: once handed back, they finish at once.
    jobs |= {m: client.submit(prompt=f"[[sim: stall 90 times=1]] {m}", idle_timeout_s=120).id for m in long}
    run_until(lambda: len(claude_pids(jobs.values())) >= 4, 120, what="four runs in flight")
    run_until(lambda: all(requests_of(simulator, m) for m in jobs), 60, what="every run's request in flight")

    draining.proc.send_signal(15)
    taker = workers(concurrency=4, lease_ttl_s=10, wait=False)  # consumes once the draining worker stops claiming
    assert draining.proc.wait(120) == 0
    taker.wait_ready(120)

    for marker, job_id in jobs.items():
        record = client.wait(job_id, timeout=120)
        assert record.status == "succeeded", (marker, record.attempts, record.error)
        outcomes = [a.outcome for a in record.attempts]
        if marker in short:
            assert outcomes == ["success"] and record.worker == draining.worker_id, (marker, record.attempts)
        else:
            # Handed back (free), then finished elsewhere, once; a lease lost on the way (free) may come between.
            assert outcomes[0] == "requeued" and outcomes[-1] == "success", (marker, outcomes)
            assert set(outcomes[1:-1]) <= {"worker_lost"} and record.worker == taker.worker_id, (marker, outcomes)
            assert record.counted_attempts == 1
        assert not overlapping(requests_of(simulator, marker)), marker
        assert [e.type for e in client.events(job_id)].count("succeeded") == 1
    assert claude_pids(jobs.values()) == []
