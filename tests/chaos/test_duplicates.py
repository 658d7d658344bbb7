"""Duplicate delivery: the same Celery message delivered twice, and a message redelivered (flagged `redelivered`,
as kombu puts back what a worker held unacked when its connection closed) while the first run is still alive.
Either way the job runs once: one attempt, one request in the simulator's log. kombu keeps no copy of delivered
messages in Redis (ack emulation is off, config/celery.py), which the second test checks too.

(tests/e2e/test_engine.py::test_duplicate_delivery_while_running_runs_once covers a second *new* message for a
running job.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until

pytestmark = pytest.mark.e2e


def requests_of(simulator: Any, marker: str) -> list[dict[str, Any]]:
    return [e for e in simulator.requests() if any(marker in str(m.get("text")) for m in e.get("messages", []))]


def test_the_same_message_delivered_twice_runs_the_job_once(
    client: Client, workers: WorkerFactory, simulator: Any, redis_client: redis.Redis, unique: str
) -> None:
    marker = f"twice-{unique}"
    job = client.submit(prompt=f"[[sim: stall 2]] {marker}", idle_timeout_s=60)
    queue = client.settings.queue
    (message,) = redis_client.lrange(queue, 0, -1)  # no worker yet: the one message waits in the list
    redis_client.lpush(queue, message)  # byte for byte the same message (same task id), a second time
    worker = workers(concurrency=2)
    record = client.wait(job.id, timeout=120)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["success"]
    run_until(lambda: "delivery dropped" in worker.log(), 30, what="the second delivery dropped")
    assert len(requests_of(simulator, marker)) == 1
    assert [e.type for e in client.events(job.id)].count("run_started") == 1
    run_until(lambda: redis_client.llen(queue) == 0, 30, what="both deliveries consumed")


def test_a_message_redelivered_while_its_run_is_alive_runs_the_job_once(
    client: Client, workers: WorkerFactory, simulator: Any, redis_client: redis.Redis, unique: str
) -> None:
    marker = f"redelivered-{unique}"
    job = client.submit(prompt=f"[[sim: stall 6]] {marker}", idle_timeout_s=60)
    queue = client.settings.queue
    (message,) = redis_client.lrange(queue, 0, -1)  # no worker yet: the one message waits in the list
    worker = workers(concurrency=2)
    run_until(lambda: claude_pids([job.id]), 60, what="the first run's CLI")
    assert not redis_client.exists("unacked", "unacked_index")  # delivered, and no copy of it kept in Redis
    # What kombu does with a message a worker held unacked when its connection closed: the same payload, flagged
    # as redelivered, back on the queue's list.
    payload: dict[str, Any] = json.loads(message)
    payload.setdefault("headers", {})["redelivered"] = True
    redis_client.lpush(queue, json.dumps(payload))

    run_until(lambda: "delivery dropped (busy)" in worker.log(), 30, what="the redelivery dropped as busy")
    record = client.wait(job.id, timeout=120)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["success"]
    assert len(requests_of(simulator, marker)) == 1
    assert [e.type for e in client.events(job.id)].count("run_started") == 1
