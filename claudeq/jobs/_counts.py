"""Jobs per status, read from the indexes and counters the job scripts keep: what `claudeq top` shows and the
exporter's `claudeq_jobs{status}` gauge serves. Here, not in the exporter, so the producer's `claudeq top` runs
without the worker's packages (docs/architecture.md#packaging)."""

from __future__ import annotations

import typing

import redis

from claudeq.keys import Keys
from claudeq.models import TERMINAL, JobStatus

#: The finished statuses, in the order of `JobStatus`.
FINISHED: tuple[str, ...] = tuple(status for status in typing.get_args(JobStatus) if status in TERMINAL)


def status_counts(client: redis.Redis, keys: Keys, now: float) -> dict[str, int]:
    """Jobs per status, O(statuses + hours of retention), never O(jobs).

    Active statuses are the sizes of their indexes (`waiting`, `queued`, `deferred`, `running`), which the status
    scripts keep in the same atomic step as the status itself: exact. A finished job is counted under the hour its
    retention ends and leaves the count when that hour is over, so a finished count may include jobs that expired
    less than an hour ago."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.waiting)
    pipe.zcard(keys.queued)
    pipe.zcard(keys.deferred)
    pipe.zcard(keys.running)
    for status in FINISHED:
        pipe.hgetall(keys.finished_counts(status))
    waiting, queued, deferred, running, *hours = pipe.execute()
    counts = {"waiting": int(waiting), "queued": int(queued), "deferred": int(deferred), "running": int(running)}
    current = int(now // 3600)
    for status, by_hour in zip(FINISHED, hours, strict=True):
        counts[status] = max(0, sum(_count(n) for hour, n in by_hour.items() if _count(hour) > current))
    return counts


def _count(value: bytes | str | None) -> int:
    """A stored counter; one that is not an integer (damaged) counts as 0 rather than failing the scrape."""
    try:
        return int(value or 0)
    except ValueError:
        return 0
