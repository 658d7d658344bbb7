"""The `claudeq.run` broker message, built the way Celery's `send_task` builds it for kombu's Redis transport.

Producers and workers push these messages themselves (LPUSH, pipelined with the job's record) instead of calling
`send_task` per job: one round trip per job instead of three, and a batch of jobs in a handful of commands. The
message is byte-for-byte the shape Celery writes (task protocol 2, JSON body in base64), so any Celery worker
consumes it; `tests/integration/test_submit_many.py` compares it with a real `send_task`. What is not sent:
Celery's `task-sent` monitoring event (the job record and its events are claudeq's source of truth).

One header is claudeq's own: `claudeq_sent`, the send time (epoch s). The reconciler compares it with a job's own
send time to tell, from the oldest message of a queue alone, whether that job's message can still be waiting.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import uuid
from bisect import bisect
from typing import Any

from claudeq.config.celery import TASK_RUN

#: kombu's Redis transport keeps one list per priority step: `queue` for 0 and `queue\x06\x16<n>` for the others.
KOMBU_PRIORITY_SEP = "\x06\x16"
#: kombu's default priority steps (claudeq does not change them): a priority goes to the step at or below it.
KOMBU_PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)
#: The header carrying the send time.
SENT_HEADER = "claudeq_sent"

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_EMBED_JSON = json.dumps(_EMBED)
_TASK_JSON = json.dumps(TASK_RUN)
_REPLY_TO = str(uuid.uuid4())  # Celery uses one per app; nothing replies to claudeq.run


_origin_cache: tuple[int, str] = (0, "")


def _origin() -> str:
    global _origin_cache
    pid = os.getpid()
    if _origin_cache[0] != pid:  # once per process (a fork gets its own)
        _origin_cache = (pid, f"gen{pid}@{socket.gethostname()}")
    return _origin_cache[1]


#: The broker priority a backlogged tenant's messages are sent at (producer/client.py TENANT_BACKLOG): the last step.
BACKLOG_PRIORITY = 9


def list_for(queue: str, priority: int) -> str:
    """The Redis list a message of this priority goes to (kombu's `_q_for_pri`)."""
    step = KOMBU_PRIORITY_STEPS[bisect(KOMBU_PRIORITY_STEPS, max(0, min(9, priority))) - 1]
    return f"{queue}{KOMBU_PRIORITY_SEP}{step}" if step else queue


def run_message(job_id: str, queue: str, priority: int = 0, sent_at: float | None = None) -> str:
    """The JSON text kombu would LPUSH for `send_task('claudeq.run', args=[job_id], queue=…, priority=…)`.

    Built from a template (the same keys in the same order as `json.dumps` of Celery's message, every variable part
    JSON-encoded): a batch of 100,000 jobs builds 100,000 of these, and a dict dumped per job cost more than all
    the rest of a submit."""
    task_id = json.dumps(f"{job_id}-{os.urandom(4).hex()}")
    args: list[Any] = [job_id]
    body = base64.b64encode(f"[{json.dumps(args)}, {{}}, {_EMBED_JSON}]".encode()).decode()
    sent = repr(float(time.time() if sent_at is None else sent_at))
    return (
        f'{{"body": "{body}", "content-encoding": "utf-8", "content-type": "application/json", "headers": '
        f'{{"lang": "py", "task": {_TASK_JSON}, "id": {task_id}, "shadow": null, "eta": null, "expires": null, '
        f'"group": null, "group_index": null, "retries": 0, "timelimit": [null, null], "root_id": {task_id}, '
        f'"parent_id": null, "argsrepr": {json.dumps(repr(args))}, "kwargsrepr": "{{}}", '
        f'"origin": {json.dumps(_origin())}, "ignore_result": null, "replaced_task_nesting": 0, '
        f'"stamped_headers": null, "stamps": {{}}, "{SENT_HEADER}": {sent}}}, "properties": '
        f'{{"correlation_id": {task_id}, "reply_to": "{_REPLY_TO}", "delivery_mode": 2, '
        f'"delivery_info": {{"exchange": "", "routing_key": {json.dumps(queue)}}}, "priority": {int(priority)}, '
        f'"body_encoding": "base64", "delivery_tag": "{uuid.uuid4()}"}}}}'
    )


def sent_at_of(raw: bytes | str) -> float | None:
    """The `claudeq_sent` time of a raw broker message, or None (not claudeq's, or unreadable)."""
    try:
        value = json.loads(raw)["headers"].get(SENT_HEADER)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def task_message(task: str, args: list[Any], queue: str, task_id: str) -> str:
    """The JSON text kombu would LPUSH for `send_task(task, args=args, queue=queue, task_id=task_id)`: a callback
    of the producer's own Celery app (a job's `link` / `link_error`), consumed by its own workers."""
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args)[:1024],
        "kwargsrepr": "{}",
        "origin": _origin(),
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    body = base64.b64encode(json.dumps([args, {}, _EMBED]).encode()).decode()
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "correlation_id": task_id,
                "reply_to": _REPLY_TO,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    )
