"""Fenced writes of a delivery: record fields and status changes, and events, only while its fence holds the job.

A write whose fence is stale (another worker took the job over) marks the delivery lost: it stops its run and writes
nothing more. Redis blips are retried for up to half a lease; a retried write whose first try landed with its reply
lost is recognised as landed.

Events are batched: an emitted event waits and goes to Redis with the events emitted in the meantime (one fenced
append), or with the delivery's next status write if that comes first (a terminal write puts them straight into the
record's compacted events). While someone follows the job (a follower announces itself on the follow channel: the
engine calls `followed`), an event waits at most `EVENT_LINGER_S`; otherwise up to `idle_linger_s`
(`CLAUDEQ_EVENT_FLUSH_S`), so a short run's events reach Redis once, inside its terminal write, and a long run's in a
few appends. A run's burst of events costs one script call, not one each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Unpack

import redis
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from claudeq.jobs import JobFields
from claudeq.models import TERMINAL, Event, JobStatus, TerminalStatus

from ..store.job_store import CANCELLED, Freed, JobWrite, SlotRelease, WorkerJobStore, Written
from .state import Delivery, ScheduledFlush

log = logging.getLogger("claudeq.engine")

#: How long an emitted event may wait for others to share its append while the job is followed (s): what a
#: follower's view may lag behind.
EVENT_LINGER_S = 0.1
#: How long a follower's announcement holds (s): followers announce themselves every FOLLOW_ANNOUNCE_S
#: (claudeq/jobs/_store.py), so a follower that goes away stops holding the job after a few seconds.
FOLLOW_HOLD_S = 6.0


class FencedWriter:
    """Writes a delivery's record and events through its fencing token."""

    def __init__(
        self,
        store: WorkerJobStore,
        lease_ttl_s: float,
        linger_s: float = EVENT_LINGER_S,
        idle_linger_s: float | None = None,
        pack_events: bool = False,
    ) -> None:
        self.store = store
        #: A terminal write of a job with no event stream brings its compacted events packed (CLAUDEQ_EVENT_CODEC).
        self.pack_events = pack_events
        self.lease_ttl_s = lease_ttl_s
        self.linger_s = linger_s
        #: How long an event may wait while nobody follows the job (None: `linger_s`, followed or not).
        self.idle_linger_s = linger_s if idle_linger_s is None else max(linger_s, idle_linger_s)

    async def write(
        self,
        d: Delivery,
        status: JobStatus | None = None,
        event: Event | None = None,
        *,
        hold_events: bool = False,
        **fields: Unpack[JobFields],
    ) -> Written:
        """Write `fields` (and move to `status`, appending the pending events and `event` in the same script) while
        the fence holds; False (and the delivery lost) when stale; CANCELLED when a write to `queued` or `deferred`
        ended the job `cancelled` instead (its cancel flag was set: WorkerJobStore.write_call). `hold_events` (a write
        that moves no status: the attempt's start): leave the pending events waiting unless the job is followed."""
        written, _ = await self._write(d, status, event, None, hold_events, fields)
        return written

    async def finish(
        self, d: Delivery, status: TerminalStatus, event: Event, release: SlotRelease, **fields: Unpack[JobFields]
    ) -> tuple[Written, Freed]:
        """`write` of a terminal status that also frees what `release` names in the same script
        (WorkerJobStore.finish_call): whether it was written, and what it freed (nothing when a blip hid the script's
        answer and the write was found landed afterwards: the caller frees the slot apart, which is harmless)."""
        written, freed = await self._write(d, status, event, release, False, fields)
        return written, freed if freed is not None else Freed(False)

    async def _write(
        self,
        d: Delivery,
        status: JobStatus | None,
        event: Event | None,
        release: SlotRelease | None,
        hold_events: bool,
        fields: JobFields,
    ) -> tuple[Written, Freed | None]:
        if d.lost:
            return False, None
        if event is not None and event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        async with d.events.lock:
            if hold_events and status is None and event is None and not self._followed(d):
                # The attempt's start leaves the run's events waiting: nobody follows, and its status write or a
                # later flush takes them. (Every other write takes them: between attempts, the session planner reads
                # the last attempt's `session` event from Redis.)
                events: list[Event] = []
            else:
                events, d.events.pending = d.events.pending, []
            if event is not None:
                events.append(event)
            return await self._write_locked(d, status, events, fields, release)

    def followed_now(self, d: Delivery) -> bool:
        """Whether the delivery's events are stored within `linger_s` now (someone follows the job, or no idle
        linger is set): a write then takes the events waiting."""
        return self._followed(d)

    def lost(self, d: Delivery, what: str) -> None:
        """A fenced step of the delivery found the fence stale (`what`: what became of it, e.g. "write dropped"):
        another worker owns the job. Stop the run, and write nothing more."""
        log.warning("job %s: stale fence %d, %s (another worker owns the job)", d.job_id, d.lease.fence, what)
        d.why = "lost"
        d.cancel.set()

    def _followed(self, d: Delivery) -> bool:
        return self.idle_linger_s <= self.linger_s or d.events.followed_until > time.monotonic()

    async def _write_locked(
        self,
        d: Delivery,
        status: JobStatus | None,
        events: list[Event],
        fields: JobFields,
        release: SlotRelease | None = None,
    ) -> tuple[Written, Freed | None]:
        if d.lost:
            return False, None
        started = time.monotonic()
        try:
            ok, freed = await self._write_once(d, status, events, fields, release)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # A blip: try again for up to half a lease from the first try. It may have landed with its reply lost:
            # then the job already holds what we wrote (and nothing says what it freed: the caller frees the slot
            # again, which is harmless).
            ok, freed = await self._write_retrying(d, status, events, fields, started, exc, release)
            if not ok:
                ok, freed = await self._landed(d, status), None
        if not ok:
            self.lost(d, "write dropped")
        return ok, freed

    async def _write_retrying(
        self,
        d: Delivery,
        status: JobStatus | None,
        events: list[Event],
        fields: JobFields,
        started: float,
        first: redis.RedisError,
        release: SlotRelease | None = None,
    ) -> tuple[Written, Freed | None]:
        """The tries after a first one that failed (`first`); raises the last error once half a lease has gone
        since `started`."""
        left = max(1.0, self.lease_ttl_s / 2) - (time.monotonic() - started)
        if left <= 0:
            raise first
        answer: tuple[Written, Freed | None] = (False, None)
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((redis.ConnectionError, redis.TimeoutError)),
            wait=wait_exponential(multiplier=0.1, max=2),
            stop=stop_after_delay(left),
            reraise=True,
        ):
            with attempt:
                if attempt.retry_state.attempt_number == 1:
                    await asyncio.sleep(0.1)  # the wait before a second try
                answer = await self._write_once(d, status, events, fields, release)
        return answer

    async def _write_once(
        self,
        d: Delivery,
        status: JobStatus | None,
        events: list[Event],
        fields: JobFields,
        release: SlotRelease | None = None,
    ) -> tuple[Written, Freed | None]:
        if status not in TERMINAL and events:
            d.events.stream = True  # its events go to the stream (set before the call: a lost reply may have landed)
        pack = self.pack_events and status in TERMINAL and not d.events.stream
        d.events.packed = pack
        write = JobWrite(d.job_id, d.lease.fence, status, fields, events, stream=d.events.stream, pack=pack)
        if release is not None and status in TERMINAL:
            freed = await self.store.send(self.store.finish_call(write, release))
            return freed.done, freed
        return await self.store.send(self.store.write_call(write)), None

    async def _landed(self, d: Delivery, status: JobStatus | None) -> Written:
        stored = await self.store.lease_state(d.job_id)
        if stored.fence is None or stored.fence != d.lease.fence:
            return False
        current = stored.status
        if status in ("queued", "deferred") and current == "cancelled":
            return CANCELLED  # it landed, and the cancel flag turned it into the job's end
        return status is None or current == status

    def event(self, d: Delivery, event: Event) -> None:
        """Queue an event for the job's stream (numbered with the current attempt): stored within `linger_s`, with
        the events emitted meanwhile, or by the next fenced write; refused once the fence no longer holds the job
        (which marks the delivery lost). Plain, not a coroutine: it never waits (a run emits several events)."""
        if d.lost:
            return
        if event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        d.events.pending.append(event)
        self._schedule(d)

    def followed(self, d: Delivery, hold_s: float = FOLLOW_HOLD_S) -> None:
        """Someone follows the job: for `hold_s`, store its events within `linger_s`, starting with what waits."""
        d.events.followed_until = time.monotonic() + hold_s
        if d.events.pending and not d.lost:
            self._schedule(d)

    def _schedule(self, d: Delivery) -> None:
        """Make sure a flush of the pending events comes within the wait that applies now (followed or not): a loop
        timer, which starts a task only if events still wait when it comes due (ScheduledFlush)."""
        followed = self._followed(d)
        flusher = d.events.flusher
        if flusher is not None and not flusher.done() and not followed:
            return  # one comes soon enough: any flush is set within `idle_linger_s` of its making (or is storing)
        loop = asyncio.get_running_loop()
        at = loop.time() + (self.linger_s if followed else self.idle_linger_s)
        if flusher is not None and not flusher.done():
            if d.events.flush_at <= at:
                return  # one comes soon enough (or is storing now, and looks again when done)
            # A follower arrived while the flush was set for later: a sooner one. The later one is left to run (it
            # may find nothing to store); close() stops it.
            d.events.later_flushers.add(flusher)
        d.events.flush_at = at
        d.events.flusher = flush = ScheduledFlush(at)
        flush.timer = loop.call_at(at, self._due, d, flush)

    def _due(self, d: Delivery, flush: ScheduledFlush) -> None:
        """`flush` came due: store what waits (a task), unless nothing does."""
        if not d.events.pending or d.lost:
            flush.ended = True
            d.events.later_flushers.discard(flush)
            return
        flush.task = task = asyncio.get_running_loop().create_task(self._flush_due(d, flush))
        if flush in d.events.later_flushers:
            task.add_done_callback(lambda _: d.events.later_flushers.discard(flush))

    async def _flush_due(self, d: Delivery, flush: ScheduledFlush) -> None:
        await self.flush(d)
        if d.events.pending and not d.lost and d.events.flusher is flush:
            d.events.flusher = None  # events emitted while this flush stored the others: their own flush
            self._schedule(d)

    async def flush(self, d: Delivery) -> None:
        """Store the delivery's pending events now (one fenced append); a Redis error only logs."""
        async with d.events.lock:
            events, d.events.pending = d.events.pending, []
            if not events or d.lost:
                return
            d.events.stream = True
            try:
                stored = await self.store.send(self.store.append_call(d.job_id, d.lease.fence, events))
            except redis.RedisError as exc:
                log.warning("job %s: %d event(s) not stored (%s)", d.job_id, len(events), type(exc).__name__)
                return
            if stored is None and not d.lost:
                self.lost(d, "event refused")

    async def close(self, d: Delivery) -> None:
        """The delivery ends: store what is still pending (refused if the job moved on) and stop its flush timer."""
        flusher, d.events.flusher = d.events.flusher, None
        for flush in [flusher, *d.events.later_flushers]:
            if flush is not None and not flush.done():
                flush.cancel()
        if d.events.pending and not d.lost:
            await self.flush(d)
