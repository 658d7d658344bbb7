"""A user's own Celery app, for the end-notification tests: its task `cqtest.job_ended` receives a finished job's
public record (a `link` / `link_error` callback) and appends `<job id> <status>` to a Redis list, so the test sees
what its workers received and how often.

Configured from the environment: CQT_LINK_BROKER (the broker URL), CQT_LINK_QUEUE, CQT_LINK_SEEN (the list key).
Run as `celery -A tests.support.link_app worker -Q $CQT_LINK_QUEUE --pool solo`.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

app = Celery("cqtest", broker=os.environ.get("CQT_LINK_BROKER", "redis://127.0.0.1:6379/0"), set_as_current=False)
app.conf.update(
    task_default_queue=os.environ.get("CQT_LINK_QUEUE", "cqtest-links"),
    worker_enable_remote_control=False,  # no pidbox keys in the shared Redis
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    broker_transport_options={"ack_emulation": False},  # no `unacked` hash in the shared Redis
)
_seen = redis.Redis.from_url(os.environ.get("CQT_LINK_BROKER", "redis://127.0.0.1:6379/0"))


@app.task(name="cqtest.job_ended")
def job_ended(record: dict[str, Any]) -> None:
    _seen.rpush(os.environ["CQT_LINK_SEEN"], f"{record['id']} {record['status']}")
