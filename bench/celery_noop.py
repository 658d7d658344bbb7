"""The baseline of bench_scale's finished jobs/s: a plain Celery task that sleeps as long as a fake run and does
nothing else, through the same worker layout (`--workers` processes x `--slots` threads), the same Redis and the
same broker transport options as claudeq (ack emulation off, priority queues). What Celery alone finishes per
second on this machine is the ceiling claudeq's control plane is measured against.

Run by bench_scale as `celery -A bench.celery_noop:app worker -P threads -c SLOTS`; the environment gives the
broker (`BENCH_NOOP_URL`), the queue (`BENCH_NOOP_QUEUE`) and the sleep (`BENCH_NOOP_SLEEP_S`). Each task counts
itself in `BENCH_NOOP_QUEUE:done` (one INCR, the one command it adds).
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

#: The task's name.
TASK = "bench.noop"

_URL = os.environ.get("BENCH_NOOP_URL", "redis://127.0.0.1:6379/0")
_QUEUE = os.environ.get("BENCH_NOOP_QUEUE", "bench-noop")
_SLEEP_S = float(os.environ.get("BENCH_NOOP_SLEEP_S", "1.0"))

app = Celery("bench-noop", broker=_URL, set_as_current=False)
app.conf.update(
    task_default_queue=_QUEUE,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_transport_options={"queue_order_strategy": "priority", "ack_emulation": False},
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
)
_done = redis.Redis.from_url(_URL, max_connections=1024)  # a connection for each of the threads at once


@app.task(name=TASK, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def noop(_job: str) -> None:
    """Sleep like a fake run; count the task done."""
    time.sleep(_SLEEP_S)
    _done.incr(f"{_QUEUE}:done")
