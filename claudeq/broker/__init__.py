"""The broker: the `claudeq.run` message as Celery's `send_task` builds it, and what claudeq reads of Celery's Redis
lists. Both import nothing but redis and the task's name, so the producer's submit and `claudeq top` run on the base
install (docs/architecture.md#packaging). The public face of the package: import from here, never from its `_`
modules (docs/architecture.md#who-imports-whom).

- `_message.py`: the message, its list and its send time (`run_message`, `list_for`, `sent_at_of`);
- `_queues.py`: a queue's lists and the jobs whose messages wait there (`queue_lists`, `pending_job_ids`).
"""

from __future__ import annotations

from ._message import (
    BACKLOG_PRIORITY,
    KOMBU_PRIORITY_SEP,
    KOMBU_PRIORITY_STEPS,
    SENT_HEADER,
    list_for,
    run_message,
    sent_at_of,
    task_message,
)
from ._queues import KOMBU_PRIORITIES, job_id_of, pending_job_ids, queue_lists

__all__ = [
    "BACKLOG_PRIORITY",
    "KOMBU_PRIORITIES",
    "KOMBU_PRIORITY_SEP",
    "KOMBU_PRIORITY_STEPS",
    "SENT_HEADER",
    "job_id_of",
    "list_for",
    "pending_job_ids",
    "queue_lists",
    "run_message",
    "sent_at_of",
    "task_message",
]
