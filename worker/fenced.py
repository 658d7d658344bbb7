"""Fenced writes of a delivery: record fields and status changes, and events, only while its fence holds the job.

A write whose fence is stale (another worker took the job over) marks the delivery lost: it stops its run and writes
nothing more. Redis blips are retried for up to half a lease; a retried write whose first try landed with its reply
lost is recognised as landed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Unpack

import redis
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from claudeq.jobs import JobFields
from claudeq.models import Event, JobStatus
from claudeq.worker.delivery import Delivery
from claudeq.worker.job_store import WorkerJobStore

log = logging.getLogger("claudeq.engine")


class FencedWriter:
    """Writes a delivery's record and events through its fencing token."""

    def __init__(self, store: WorkerJobStore, lease_ttl_s: float) -> None:
        self.store = store
        self.lease_ttl_s = lease_ttl_s

    async def write(
        self, d: Delivery, status: JobStatus | None = None, event: Event | None = None, **fields: Unpack[JobFields]
    ) -> bool:
        """Write `fields` (and move to `status`, appending `event` in the same script) while the fence holds; False
        (and the delivery lost) when stale."""
        if d.lost:
            return False
        if event is not None and event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        tries = 0
        ok = False
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((redis.ConnectionError, redis.TimeoutError)),
            wait=wait_exponential(multiplier=0.1, max=2),
            stop=stop_after_delay(max(1.0, self.lease_ttl_s / 2)),
            reraise=True,
        ):
            with attempt:
                tries += 1
                ok = await asyncio.to_thread(self._write_once, d, status, event, fields)
        if not ok and tries > 1:
            # The first try may have landed with its reply lost: then the job already holds what we wrote.
            ok = await asyncio.to_thread(self._landed, d, status)
        if not ok:
            log.warning("job %s: stale fence %d, write dropped (another worker owns the job)", d.job_id, d.fence)
            d.why = "lost"
            d.cancel.set()
        return ok

    def _write_once(self, d: Delivery, status: JobStatus | None, event: Event | None, fields: JobFields) -> bool:
        return self.store.write(d.job_id, d.fence, status, event=event, **fields)

    def _landed(self, d: Delivery, status: JobStatus | None) -> bool:
        fence, current = self.store.fence_and_status(d.job_id)
        if fence is None or fence != d.fence:
            return False
        return status is None or current == status

    async def event(self, d: Delivery, event: Event) -> None:
        """Append an event to the job's stream (numbered with the current attempt), refused once the fence no longer
        holds the job (which marks the delivery lost); a Redis error only logs."""
        if d.lost:
            return
        if event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        try:
            stored = await asyncio.to_thread(self.store.append_event_fenced, d.job_id, d.fence, event)
        except redis.RedisError as exc:
            log.warning("job %s: event %s not stored (%s)", d.job_id, event.type, type(exc).__name__)
            return
        if stored is None and not d.lost:
            # The fence no longer holds the job: another worker owns it. Stop, and write nothing more.
            log.warning("job %s: stale fence %d, event refused (another worker owns the job)", d.job_id, d.fence)
            d.why = "lost"
            d.cancel.set()
