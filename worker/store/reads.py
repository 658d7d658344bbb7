"""LoopReads: a job's reads (record, status, a listing's records, events) from the worker's event loop.

The same commands and parsing as the producer's `claudeq.jobs.JobStore.get` / `status` / `records` /
`read_events` (each is its commands and the parsing of their replies), sent by the worker store on its async client
(`claudeq.script_calls.AsyncCalls._pipe`) instead of from a thread. Only a result or history that moved to the
transcript archive is read in a thread: the archive's database client is sync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from claudeq.errors import RecordUnreadable
from claudeq.jobs import listing_records, listing_replies, parse_record, record_reply, status_reply
from claudeq.models import Event, JobRecord, JobStatus

if TYPE_CHECKING:
    from claudeq.worker.store.job_store import WorkerJobStore


class LoopReads:
    """The reads the worker's loops make of job state, as coroutines (`WorkerJobStore.reads`)."""

    def __init__(self, store: WorkerJobStore) -> None:
        self._store = store

    async def get(self, job_id: str) -> JobRecord:
        """`JobStore.get` from the loop: the record; JobNotFound or RecordUnreadable when it cannot be had."""
        store = self._store
        (reply,) = await store._pipe(store._queue_get(job_id), raise_on_error=False)
        fields = record_reply(job_id, reply)
        await self._archived_results([(job_id, fields)])
        return parse_record(job_id, fields)

    async def status(self, job_id: str) -> JobStatus | None:
        """`JobStore.status` from the loop: the status only, None when the job does not exist."""
        store = self._store
        (reply,) = await store._pipe(store._queue_status(job_id), raise_on_error=False)
        return status_reply(job_id, reply)

    async def records(self, job_ids: Sequence[str]) -> list[JobRecord | RecordUnreadable | None]:
        """`JobStore.records` from the loop: the records of `job_ids` in one round trip (None: no such job)."""
        store = self._store
        read, out = listing_replies(job_ids, await store._pipe(store._queue_records(job_ids), raise_on_error=False))
        await self._archived_results(read)
        return listing_records(job_ids, read, out)

    async def events(self, job_id: str, after: str = "0-0", count: int = 500) -> list[tuple[str, Event]]:
        """`JobStore.read_events` without blocking, from the loop: the events after entry id `after`."""
        store = self._store
        replies = await store._pipe(store._queue_events(job_id, after, count), raise_on_error=False)
        compacted, archived = replies[-1] if isinstance(replies[-1], list) else (None, None)
        if store.archive is None or compacted or not archived:
            return store._events_page(job_id, after, count, replies)
        # A finished job's history that moved to the archive: read from its database (sync).
        return await asyncio.to_thread(store._events_page, job_id, after, count, replies)

    async def announce_follow(self, job_id: str) -> None:
        """`JobStore.announce_follow` from the loop: the run of `job_id` stores its events at once (someone follows
        them); at most once per FOLLOW_ANNOUNCE_S, and a failure only means they come later."""
        store = self._store
        if not store._announce_due(job_id):
            return
        try:
            await store._pipe(lambda p: p.publish(store.keys.follow_channel, job_id))
        except redis.RedisError:
            pass

    async def _archived_results(self, records: list[tuple[str, dict[str, str]]]) -> None:
        if self._store._moved_results(records):
            await asyncio.to_thread(self._store._archived_results, records)
