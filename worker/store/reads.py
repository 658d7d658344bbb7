"""LoopReads: a job's reads (record, status, a listing's records, events) from the worker's event loop.

Each is the producer's read (`claudeq.jobs.JobStore.get_call` / `status_call` / `records_call` / `events_call`), sent
by the worker store on its async client (`claudeq.script_calls.AsyncCalls.send`) instead of from a thread. Only a
result or history that moved to the transcript archive is read in a thread (the call says so: `PipeCall.blocking`):
the archive's database client is sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from claudeq.errors import RecordUnreadable
from claudeq.models import Event, JobRecord, JobStatus

if TYPE_CHECKING:
    from .job_store import WorkerJobStore


class LoopReads:
    """The reads the worker's loops make of job state, as coroutines (`WorkerJobStore.reads`)."""

    def __init__(self, store: WorkerJobStore) -> None:
        self._store = store

    async def get(self, job_id: str) -> JobRecord:
        """`JobStore.get_call` from the loop: the record; JobNotFound or RecordUnreadable when it cannot be had."""
        return await self._store.send(self._store.get_call(job_id))

    async def status(self, job_id: str) -> JobStatus | None:
        """`JobStore.status_call` from the loop: the status only, None when the job does not exist."""
        return await self._store.send(self._store.status_call(job_id))

    async def records(self, job_ids: Sequence[str]) -> list[JobRecord | RecordUnreadable | None]:
        """`JobStore.records_call` from the loop: the records of `job_ids` in one round trip (None: no such job)."""
        return await self._store.send(self._store.records_call(job_ids))

    async def events(self, job_id: str, after: str = "0-0", count: int = 500) -> list[tuple[str, Event]]:
        """`JobStore.events_call` from the loop: the events after entry id `after`, without blocking."""
        return await self._store.send(self._store.events_call(job_id, after, count))

    async def announce_follow(self, job_id: str) -> None:
        """`JobStore.announce_follow` from the loop: the run of `job_id` stores its events at once (someone follows
        them); at most once per FOLLOW_ANNOUNCE_S, and a failure only means they come later."""
        try:
            await self._store.send(self._store.announce_call(job_id))
        except redis.RedisError:
            pass
