"""Hostile input from the broker: garbage on the queue (not JSON, a JSON list, an object without a message's fields,
a body that is not base64, an unknown task name, wrong arguments) is dropped with a log line and the worker goes
on; before, one entry that was not JSON stopped the whole worker."""

from __future__ import annotations

import base64
import json

import pytest
import redis

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until

pytestmark = pytest.mark.e2e


def celery_message(task: str, args: object, task_id: str) -> str:
    """A kombu/Celery protocol-2 message as the Redis transport stores it."""
    body = base64.b64encode(json.dumps([args, {}, {}]).encode()).decode()
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "argsrepr": "", "retries": 0},
            "properties": {
                "correlation_id": task_id,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": "q"},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": task_id,
            },
        }
    )


def test_garbage_on_the_queue_is_dropped_with_a_log_line_and_the_worker_goes_on(
    client: Client, workers: WorkerFactory, redis_client: redis.Redis, unique: str
) -> None:
    worker = workers()
    queue = client.settings.queue
    garbage = [
        b"not json at all",
        b"[1, 2, 3]",
        b"{}",
        json.dumps({"body": "!!not base64!!", "headers": {"task": "claudeq.run", "id": "x1"}}).encode(),
        celery_message("claudeq.no_such_task", ["whatever"], f"unknown-{unique}").encode(),
        celery_message("claudeq.run", [["a", "list"], 7], f"badargs-{unique}").encode(),
    ]
    for raw in garbage:
        redis_client.lpush(queue, raw)
    run_until(lambda: redis_client.llen(queue) == 0, 60, what="the garbage consumed")
    run_until(lambda: "claudeq.no_such_task" in worker.log(), 30, what="the unknown task name logged")

    job = client.submit(prompt=f"after the garbage {unique}")
    record = client.wait(job.id, timeout=120)
    assert record.status == "succeeded", record.error
    assert worker.alive() and worker.heartbeat_fresh()
    log = worker.log()
    assert "Unrecoverable error" not in log
    # Not JSON, a list, an object without a message's fields, a body that is not base64: dropped by the transport.
    assert log.count("dropped a queue entry that is not a Celery message") == 4
    assert "malformed message" in log  # claudeq.run with arguments that are not a job id: dropped by the task
    # No ack emulation: kombu keeps no copy of a delivered message (no `unacked` hash to leak garbage into).
    assert not redis_client.exists("unacked", "unacked_index")
