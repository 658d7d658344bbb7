"""What claudeq reads of Celery's Redis broker: the lists behind a queue and the jobs whose messages wait there."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable

import redis

from claudeq.config.celery import TASK_RUN

#: kombu's Redis transport keeps one list per priority step: `queue` for 0 and `queue\x06\x16<n>` for the others.
KOMBU_PRIORITY_SEP = "\x06\x16"
KOMBU_PRIORITIES: tuple[int, ...] = tuple(range(1, 10))  # every step a custom `priority_steps` could use


def queue_lists(queue: str) -> list[str]:
    """The Redis lists that hold a Celery queue's messages (all priorities)."""
    return [queue] + [f"{queue}{KOMBU_PRIORITY_SEP}{p}" for p in KOMBU_PRIORITIES]


def job_id_of(raw: bytes | str) -> str | None:
    """The job id a raw `claudeq.run` broker message carries, or None for anything else."""
    try:
        headers = json.loads(raw)["headers"]
        if headers.get("task") != TASK_RUN:
            return None
        args = ast.literal_eval(headers.get("argsrepr") or "()")
    except (ValueError, KeyError, TypeError, SyntaxError):
        return None
    if isinstance(args, list | tuple) and args and isinstance(args[0], str):
        return args[0]
    return None


def pending_job_ids(client: redis.Redis, queues: Iterable[str]) -> set[str]:
    """Job ids whose `claudeq.run` message still waits in one of `queues` (read whole: call it sparingly)."""
    found: set[str] = set()
    for queue in set(queues):
        for name in queue_lists(queue):
            for raw in client.lrange(name, 0, -1):
                job_id = job_id_of(raw)
                if job_id is not None:
                    found.add(job_id)
    return found
