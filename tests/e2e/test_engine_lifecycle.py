"""Worker lifecycle end to end: graceful shutdown and requeue, a repeated signal, `--check`, and fencing of a worker
that was paused (SIGSTOP) while another took its job over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.main import EXIT_OK, EXIT_UNHEALTHY
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, count_claude, run_until
from tests.support.tree import ROOT
from tests.support.worker_proc import worker_env

pytestmark = pytest.mark.e2e


def test_sigterm_lets_a_short_run_finish_within_the_grace_period(client: Client, workers: WorkerFactory) -> None:
    worker = workers(shutdown_grace_s=30)
    job = client.submit(prompt="[[sim: stall 2]] finish me", idle_timeout_s=60)
    run_until(lambda: claude_pids([job.id]), 60, what="claude process")
    assert worker.stop(timeout=40) == 0
    record = client.get(job.id)
    assert record.status == "succeeded" and [a.outcome for a in record.attempts] == ["success"]


def test_second_sigterm_requeues_running_jobs_and_exits_then_another_worker_finishes(
    client: Client, workers: WorkerFactory
) -> None:
    worker = workers(shutdown_grace_s=60)
    job = client.submit(prompt="[[sim: stall 60 times=1]] requeue me", idle_timeout_s=120)
    run_until(lambda: claude_pids([job.id]), 60, what="claude process")
    worker.proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    assert worker.alive() and run_call(client.store.status_call(job.id)) == "running"  # inside the grace period
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(15) is not None
    record = client.get(job.id)
    assert record.status == "queued"
    assert [a.outcome for a in record.attempts] == ["requeued"]
    assert "requeued" in [e.type for e in client.events(job.id)]
    assert count_claude([job.id]) == 0
    workers()  # the re-sent message is picked up by a fresh worker
    record = client.wait(job.id, timeout=60)
    assert record.status == "succeeded"
    assert [a.outcome for a in record.attempts] == ["requeued", "success"]
    assert record.counted_attempts == 1


def check(settings: Settings, accounts: Any, worker_id: str | None) -> int:
    env = worker_env(settings, accounts)
    if worker_id:
        env["CLAUDEQ_WORKER_ID"] = worker_id
    return subprocess.run([sys.executable, "-m", "claudeq.worker", "--check"], env=env, cwd=ROOT, timeout=60).returncode


def test_check_reports_a_fresh_heartbeat(workers: WorkerFactory, settings: Settings, accounts: Any) -> None:
    worker = workers()
    assert check(settings, accounts, worker.worker_id) == EXIT_OK
    assert check(settings, accounts, None) == EXIT_OK  # some worker of this host
    assert check(settings, accounts, "nobody") == EXIT_UNHEALTHY
    worker.stop()
    assert check(settings, accounts, worker.worker_id) == EXIT_UNHEALTHY


def test_paused_worker_whose_lease_was_taken_over_cannot_overwrite(
    client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    paused = workers()
    # Stalled far longer than a takeover needs: the paused worker can never finish first, however slow the machine.
    job = client.submit(prompt="[[sim: stall 30 times=1]] fenced", idle_timeout_s=60)
    run_until(lambda: claude_pids([job.id]), 60, what="claude process")
    rescuer = workers()
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        record = client.wait(job.id, timeout=settings.lease_ttl_s + 60)
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    assert record.status == "succeeded" and record.worker == rescuer.worker_id
    run_until(lambda: "lease lost" in paused.log() or "stale fence" in paused.log(), 15, what="stale worker noticed")
    # A graceful stop returns only when the stale worker's run has ended: whatever it would write, it has by now.
    assert paused.stop() == 0
    after = client.get(job.id)
    assert after.model_dump() == record.model_dump()  # the stale worker wrote nothing
    assert sorted(a.outcome or "" for a in after.attempts) == ["success", "worker_lost"]
