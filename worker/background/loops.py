"""Background loops every worker runs on its engine loop; each is safe with any number of workers running it.

- promoter: due deferred jobs back to the queue (atomic ZREM in `JobStore.promote`, so never twice) and re-sent;
- reconciler: running jobs whose lease expired (their worker died) get attempt outcome `worker_lost` and are
  re-enqueued (`JobStore.recover` checks the fence and the lease atomically); queued jobs nobody claimed for
  `unclaimed_resend_s` are re-sent (`claim_resend`, once across workers); the `jobs` index is trimmed now and then;
- worker heartbeat: `worker:{id}` hash (host, pid, runs in flight, started_at) and the `workers` zset;
- notifier: the end notifications of finished jobs (webhooks, Celery callbacks), due ones taken with a lease
  (worker/background/notifier.py);
- cancel listener: pub/sub on the cancel channel wakes the run of a cancelled job within milliseconds; on the follow
  channel, has the run of a followed job store its events within 0.1 s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable
from typing import TypeVar

import redis

from claudeq import connections
from claudeq.broker import BACKLOG_PRIORITY, list_for
from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.events import Requeued, ended
from claudeq.models import Attempt, JobError, JobRecord, JobSpec, TerminalStatus, utcnow
from claudeq.schedules import ScheduleStore

from ...config.tenants import DEFAULT_TENANT
from ...producer.client import Client
from ..delivery.engine import Engine
from ..loop_host import in_redis_thread
from ..store.job_store import CANCELLED, JobWrite
from .notifier import Notifier

log = logging.getLogger("claudeq.loops")
T = TypeVar("T")

#: Trim the `jobs` index every this many reconciler passes.
TRIM_EVERY = 120
#: The archiver looks for due moves this often (s); a failed move is tried again this much later (s); the archive
#: drops what outlived its retention every this many passes (and on the first).
ARCHIVE_EVERY_S = 5.0
#: The scheduler looks for due ticks this often (s): a tick fires within this of its time.
SCHEDULE_EVERY_S = 0.25
#: The notifier looks for due notifications this often (s).
NOTIFY_EVERY_S = 0.25
ARCHIVE_RETRY_S = 60.0
PURGE_EVERY = 720
#: A loop's count of the passes that could not handle a job lives this long after the last (s).
LOOP_FAILURES_TTL_S = 3600
#: A worker key lives this many heartbeats after the last one.
WORKER_TTL_HEARTBEATS = 3


def worker_ttl_s(heartbeat_s: float) -> int:
    """Expiry of a worker's heartbeat key (and the age `--check` accepts)."""
    return max(2, int(heartbeat_s * WORKER_TTL_HEARTBEATS + 0.999))


def not_a_record(exc: Exception) -> bool:
    """Whether a Redis error says a job's key holds another type than a job record (damage: the job's own)."""
    return isinstance(exc, redis.ResponseError) and "WRONGTYPE" in str(exc)


def lost_attempts(record: JobRecord, now_detail: str) -> list[Attempt]:
    """The record's attempts with the in-flight one (or a new one) marked `worker_lost`."""
    attempts = list(record.attempts)
    now = utcnow()
    if attempts and attempts[-1].outcome is None:
        attempts[-1] = attempts[-1].model_copy(
            update={"outcome": "worker_lost", "detail": now_detail, "finished_at": now}
        )
    else:
        attempts.append(
            Attempt(
                number=len(attempts) + 1,
                worker=record.worker,
                outcome="worker_lost",
                detail=now_detail,
                started_at=record.started_at or now,
                finished_at=now,
            )
        )
    return attempts


class Loops:
    """The background loops of one worker process (coroutines to run on the engine's loop)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.settings = engine.settings
        self.store = engine.store
        self.host = socket.gethostname()
        self._passes = 0  # reconciler passes this worker made (the index is trimmed every TRIM_EVERY)
        self._archive_passes = 0  # archiver passes (the archive is purged every PURGE_EVERY)
        self._running_upgraded = False  # `running` is a sorted set (WorkerJobStore.upgrade_running)
        self._sampled_minute = 0  # the epoch minute this worker last sampled the accounts' slots in

    def install(self) -> None:
        """Register every loop with the engine (before it starts)."""
        for loop_fn in (self.promoter, self.reconciler, self.heartbeat, self.cancel_listener):
            self.engine.add_background(loop_fn)
        if self.store.archive is not None:
            self.engine.add_background(self.archiver)
        self.engine.add_background(self.scheduler)
        self.engine.add_background(self.notifier_loop)

    async def _forever(self, name: str, once: object, interval_s: float) -> None:
        assert callable(once)
        while True:
            try:
                await once()
            except asyncio.CancelledError:
                raise
            except redis.RedisError as exc:
                log.warning("%s: redis error (%s); retrying", name, type(exc).__name__)
            except Exception:
                log.exception("%s: unexpected error; retrying", name)
            await asyncio.sleep(interval_s)

    async def _isolated(self, loop: str, job_id: str, step: Awaitable[T]) -> T | None:
        """Run one job's step of a pass: a job the loop cannot handle is counted, logged in one line and left for a
        later pass, and the pass goes on with the others (None). After `loop_item_max_failures` such passes the loop
        fails the job with its error (`_give_up`). Redis errors still end the pass: they are not the job's, and the
        next pass retries it; but for a job key that is no job record (WRONGTYPE), which is the job's."""
        try:
            return await step
        except Exception as exc:
            if isinstance(exc, redis.RedisError) and not not_a_record(exc):
                raise
            self.engine.metrics.loop_item_failed(loop)
            log.warning("%s: job %s failed (%s: %s); the pass goes on", loop, job_id, type(exc).__name__, exc)
            passes = await self.store.loop_failed(loop, job_id, LOOP_FAILURES_TTL_S)
            if passes >= self.settings.loop_item_max_failures:
                await self._give_up(loop, job_id, passes, exc)
            return None

    async def _give_up(self, loop: str, job_id: str, passes: int, exc: Exception) -> None:
        """Fail a job `passes` passes of `loop` could not handle, through the fenced paths every failure takes: a
        running job as the reconciler fails a poisoned one, a queued or deferred one claimed first (as a worker fails
        a record it cannot read). Its error (kind internal) says which loop and why; the loop goes on either way."""
        problem = f"{type(exc).__name__}: {exc}"[:300]
        message = (
            f"the {loop} could not handle this job in {passes} passes (last: {problem}); failed rather than tried "
            "forever. Its record may be damaged or written by another claudeq version; see the worker logs."
        )
        error = JobError(kind="internal", message=message)
        try:
            try:
                status, fence = await self.store.status_and_fence(job_id)
            except redis.ResponseError as read_error:
                if not not_a_record(read_error):
                    raise
                # Its key holds no job record: no record to fail. Out of the loops' indexes, so no pass sees it.
                await self.store.drop_from_indexes(job_id)
                await self.store.forget_loop_failures(loop, job_id)
                log.error(
                    "job %s: the %s could not handle it in %d passes: %s; its key is no job record, dropped "
                    "from the indexes",
                    job_id,
                    loop,
                    passes,
                    problem,
                )
                return
            ended_as: TerminalStatus | None = None
            if status == "running" and fence is not None:
                repaired = None if fence.isdigit() else 0  # a record that parses afterwards
                written = await self.store.recover(job_id, fence, None, ended("failed", error), error, repaired)
                if written:  # CANCELLED: its cancel flag was set, so it ended cancelled instead
                    ended_as = "cancelled" if written == CANCELLED else "failed"
            elif status in ("queued", "deferred"):
                if status == "deferred":
                    await self.store.promote(job_id, None, force=True)
                claim = await self.store.send(
                    self.store.claim_call(job_id, self.engine.worker_id, self.settings.lease_ttl_s)
                )
                if claim.ok:
                    write = self.store.write_call(JobWrite(job_id, claim.fence, "failed", {"error": error}))
                    if await self.store.send(write):
                        ended_as = "failed"
        except Exception as failed:
            log.error("%s: job %s: failing it failed too (%s); left for a later pass", loop, job_id, failed)
            return
        if ended_as is None:
            return  # it moved on meanwhile (finished, cancelled, taken by a worker): not the loop's any more
        await self.store.forget_loop_failures(loop, job_id)
        log.error("job %s: %s", job_id, message if ended_as == "failed" else f"{message} (cancelled instead)")
        try:
            spec: JobSpec | None = (await self.store.reads.get(job_id)).spec
        except Exception:
            spec = None
        try:
            await self.engine.accounts.admission.job_done(spec.tenant if spec else DEFAULT_TENANT, job_id)
        except Exception:
            log.exception("job %s: tenant bookkeeping failed", job_id)
        self.engine.metrics.job_finished((spec.queue if spec else None) or self.settings.queue, ended_as)

    # ---- promoter --------------------------------------------------------------------------------------------

    async def promoter(self) -> None:
        """Forever: move due deferred jobs back to the queue."""
        await self._forever("promoter", self.promote_once, self.settings.loop_interval_s)

    async def promote_once(self) -> int:
        """One promoter pass; returns how many jobs it sent.

        First the waiting lines: every account's free slots go to its best waiters (a cooldown that ended, a hold
        that lifted, a slot that expired frees slots no release hands over). Then deferred jobs whose ready time
        came (the fallback for a waiter nobody admitted, and the jobs deferred for other reasons).
        """
        admitted = await self.engine.accounts.admit()
        await self.engine.dispatch.send_admitted(admitted)
        sent = len(admitted)
        for job_id in await self.store.due_deferred():
            if await self._isolated("promoter", job_id, self.engine.promote_and_send(job_id)):
                log.info("job %s: promoted from deferred", job_id)
                sent += 1
        return sent

    # ---- scheduler ------------------------------------------------------------------------------------------

    async def scheduler(self) -> None:
        """Forever: fire the schedules whose tick came (claudeq/schedules.py), each tick once across workers."""
        await self._forever("scheduler", self.schedule_once, SCHEDULE_EVERY_S)

    async def schedule_once(self) -> int:
        """One scheduler pass; -> jobs this worker's pass submitted."""
        fired = await in_redis_thread(self._schedules.fire_due, self._submit_scheduled)
        for f in fired:
            if f.job_id is not None:
                self.engine.metrics.schedule_tick("fired")
                log.info("schedule %s: tick %s fired job %s", f.member, f.tick, f.job_id)
            if f.missed:
                self.engine.metrics.schedule_tick("missed", f.missed)
                log.warning("schedule %s: %d tick(s) missed (no scheduler ran within the grace)", f.member, f.missed)
            if f.paused:
                self.engine.metrics.schedule_tick("failed")
                self.engine.metrics.loop_item_failed("scheduler")
                log.warning("schedule %s: paused, the scheduler cannot handle it: %s", f.member, f.error)
            elif f.error is not None:
                self.engine.metrics.schedule_tick("refused")
                log.warning("schedule %s: tick %s refused: %s", f.member, f.tick, f.error)
        return sum(f.job_id is not None for f in fired)

    def _submit_scheduled(self, spec: JobSpec) -> str:
        return self._client.submit(spec).id

    @functools.cached_property
    def _client(self) -> Client:
        """A producer on this worker's Redis: a fired tick goes through submit's checks, budgets and idempotency."""
        return Client(self.settings, redis_client=self.store.redis)

    @functools.cached_property
    def _schedules(self) -> ScheduleStore:
        return ScheduleStore(self.store.redis, self.store.keys)

    # ---- notifier (worker/background/notifier.py) --------------------------------------------------------------

    async def notifier_loop(self) -> None:
        """Forever: deliver the end notifications (webhooks, Celery callbacks) that are due, each job by one worker."""
        try:
            await self._forever("notifier", self.notifier.once, NOTIFY_EVERY_S)
        finally:
            await self.notifier.close()

    @functools.cached_property
    def notifier(self) -> Notifier:
        return Notifier(self.settings, self.store, self.engine.metrics)

    # ---- archiver -------------------------------------------------------------------------------------------

    async def archiver(self) -> None:
        """Forever (with a transcript archive): move finished jobs' events and transcripts whose time came."""
        await self._forever("archiver", self.archive_once, ARCHIVE_EVERY_S)

    async def archive_once(self) -> int:
        """One archiver pass: each due member is taken by one worker (ZREM) and moved; a move that fails is tried
        again ARCHIVE_RETRY_S later. Now and then, what outlived its retention leaves the archive. -> moved."""
        archive = self.store.archive
        assert archive is not None
        moved = 0
        for member in await self.store.due_archive():
            kind, _, name = member.partition(":")
            try:
                if kind == "j":
                    moved += bool(await asyncio.to_thread(self.store.archive_job, name))  # the archive's client is sync
                elif kind == "s":
                    moved += bool(await self.engine.sessions.store().archive_session(name))
            except Exception as exc:
                self.engine.metrics.loop_item_failed("archiver")
                log.warning("archiver: moving %s failed (%s); trying again later", member, exc)
                await self.store.archive_later(member, ARCHIVE_RETRY_S)
        self._archive_passes += 1
        if self._archive_passes % PURGE_EVERY == 1:
            await asyncio.to_thread(archive.purge, self.store.keys.prefix)
        return moved

    # ---- reconciler ------------------------------------------------------------------------------------------

    async def reconciler(self) -> None:
        """Forever: recover jobs of dead workers, re-send lost messages, trim the index now and then."""
        await self._forever("reconciler", self.reconcile_once, self.settings.loop_interval_s)

    async def reconcile_once(self) -> bool:
        """One reconciler pass, when this worker takes the fleet's turn for this interval; False when another
        worker's turn runs.

        One pass per interval across the fleet: a pass reads the expired leases (one command), recovers those jobs
        and re-sends lost messages; a pass per worker would repeat that work. The turn expires with the interval, so
        a worker that dies or stalls holding it delays the next pass by one interval at most."""
        if not self._running_upgraded:
            await self.store.upgrade_running(self.settings.lease_ttl_s)
            self._running_upgraded = True
        turn = self.store.keys.reconciler_turn
        interval = self.settings.loop_interval_s
        if not await self.store.take_turn(turn, self.engine.worker_id, interval):
            return False
        await self.recover_once()
        await self.resend_once()
        await self.sample_slots()
        self._passes += 1
        if self._passes % TRIM_EVERY == 1:
            await self.store.trim_index()
            await self.store.prune_finished_counts()
        return True

    async def sample_slots(self, now: float | None = None) -> bool:
        """Once a minute (on a reconciler turn), each account's slots in use into its history (the fleet page's
        chart); False when this minute was sampled already."""
        now = time.time() if now is None else now
        minute = int(now // 60)
        if minute == self._sampled_minute:
            return False
        self._sampled_minute = minute
        await self.store.sample_slots([a.name for a in self.settings.accounts.accounts], now)
        return True

    async def recover_once(self) -> list[str]:
        """Re-enqueue running jobs whose lease expired; returns their ids."""
        recovered: list[str] = []
        # Only the runs whose lease expired: one read however many are in flight (`running` is scored by expiry).
        expired = [job_id for job_id in await self.store.expired_runs() if not self.engine.handles(job_id)]
        for job_id in expired:
            if await self._isolated("reconciler", job_id, self._recover(job_id)):
                recovered.append(job_id)
        return recovered

    async def _recover(self, job_id: str) -> bool:
        """Recover one job whose lease expired; -> whether this worker did (re-enqueued, cancelled or failed it)."""
        try:
            record = await self.store.reads.get(job_id)
        except JobNotFound:
            await self.store.forget_running(job_id)  # expired or deleted: nothing to recover
            return False
        except RecordUnreadable as exc:
            # Re-enqueue it as it is: the worker that claims it next fails it with the parse error (kind
            # internal) instead of leaving it `running` forever.
            fence = await self.store.fence_of(job_id)
            answer = False if fence is None else await self.store.recover(job_id, fence, None)
            if answer == CANCELLED:
                log.warning("job %s: worker lost and record unreadable (%s); cancelled", job_id, exc.detail)
                return True
            if answer:
                log.warning("job %s: worker lost and record unreadable (%s); re-enqueued", job_id, exc.detail)
                await self.engine.resend(job_id)
                return True
            return False
        if record.status != "running":
            return False
        detail = f"worker {record.worker or '?'} lost (lease expired)"
        attempts = lost_attempts(record, detail)
        losses = sum(1 for a in attempts if a.outcome == "worker_lost")
        if losses >= self.settings.max_worker_lost:
            return await self._poisoned(record, attempts, losses, detail)
        event = Requeued(reason=detail).event()
        answer = await self.store.recover(job_id, record.fence, attempts, event)
        if answer == CANCELLED:  # a cancel came while it ran: it ends rather than run again
            log.warning("job %s: %s; cancelled (a cancel was asked for while it ran)", job_id, detail)
            await self._ended(record, "cancelled")
            return True
        if not answer:
            return False  # another reconciler won, or the job moved on
        log.warning("job %s: %s; re-enqueued", job_id, detail)
        await self.engine.resend(job_id)
        return True

    async def _poisoned(self, record: JobRecord, attempts: list[Attempt], losses: int, detail: str) -> bool:
        """Fail a job that lost its worker `losses` times: whatever it does freezes or kills the worker running it,
        and another round would take down one more. False when another reconciler won, or the job moved on."""
        message = (
            f"the job lost its worker {losses} times (each time its lease expired mid-run; last: {detail}): failed as "
            "poisoned rather than handed to another worker. Something in the run freezes or kills the worker "
            "running it; see the worker logs of its attempts."
        )
        error = JobError(kind="poisoned", message=message)
        event = ended("failed", error)
        if not await self.store.recover(record.id, record.fence, attempts, event, error):
            return False
        log.error("job %s: %s", record.id, message)
        await self._ended(record, "failed")
        return True

    async def _ended(self, record: JobRecord, status: TerminalStatus) -> None:
        """What follows the recovery of a job that ended it (poisoned, or cancelled by its flag), as for a job the
        handler finishes: out of its tenant's active jobs, the conversation's next turn, the metrics."""
        try:
            await self.engine.accounts.admission.job_done(record.spec.tenant, record.id)
        except Exception:
            log.exception("job %s: tenant bookkeeping failed", record.id)
        self.engine.metrics.job_finished(record.spec.queue or self.settings.queue, status)
        try:
            waiting = await self.engine.sessions.finished(record, status, record.session_id)
        except Exception:
            log.exception("job %s: conversation bookkeeping failed", record.id)
            waiting = []
        for job_id in waiting:
            await self.engine.promote_and_send(job_id, force=True)

    async def resend_once(self) -> list[str]:
        """Re-send queued jobs nobody claimed for `unclaimed_resend_s` and whose message is not waiting in the
        broker (lost with a dead producer, say); returns their ids."""
        older = self.settings.unclaimed_resend_s
        sent: list[str] = []
        stale = await self.store.stale_queued(older)
        if not stale:
            return sent
        # A job stuck behind a backlog still has its message in the queue: sending another would only pile up
        # duplicates. Look again after another `unclaimed_resend_s`.
        waiting = await self._waiting_in_broker(stale)
        for job_id in stale:
            if job_id in waiting:
                await self.store.mark_sent(job_id)
                continue
            if await self._isolated("reconciler", job_id, self._resend(job_id, older)):
                sent.append(job_id)
        return sent

    async def _resend(self, job_id: str, older: float) -> bool:
        if not await self.store.claim_resend(job_id, older):
            return False
        log.info("job %s: unclaimed for %.0f s, message re-sent", job_id, older)
        await self.engine.resend(job_id)
        return True

    async def _waiting_in_broker(self, job_ids: list[str]) -> set[str]:
        """Which of `job_ids` may still have their message in the broker: O(checked jobs), never a queue read."""
        jobs: list[tuple[str, str, float]] = []
        for job_id, sent in zip(job_ids, await self.store.sent_scores(job_ids), strict=True):
            if sent is None:
                continue  # no longer queued: claim_resend will see it
            try:
                spec = (await self.store.reads.get(job_id)).spec
            except (JobNotFound, RecordUnreadable):
                spec = None
            queue = (spec.queue if spec else None) or self.settings.queue
            jobs.append((job_id, list_for(queue, spec.priority if spec else 0), sent))
            # A backlogged tenant's message waits at the last priority step instead (producer/client.py).
            jobs.append((job_id, list_for(queue, BACKLOG_PRIORITY), sent))
        return await self.store.may_be_waiting(jobs)

    # ---- worker heartbeat ------------------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """Forever: publish this worker's liveness."""
        await self._forever("heartbeat", self.beat_once, self.settings.heartbeat_s)

    async def beat_once(self) -> None:
        """Write the worker hash and its zset entry once."""
        await self.store.record_worker(
            self.engine.worker_id,
            {
                "host": self.host,
                "pid": os.getpid(),
                "runs": self.engine.in_flight,
                "concurrency": self.settings.concurrency,
                "queues": ",".join(self.settings.queues),
                "state": "stopping" if self.engine.closing else "running",
                "started_at": self.engine.started_at.isoformat(),
                "heartbeat": time.time(),
            },
            worker_ttl_s(self.settings.heartbeat_s),
        )

    def forget(self) -> None:
        """Remove this worker's heartbeat (clean exit)."""
        self.store.forget_worker(self.engine.worker_id)

    # ---- cancel listener -------------------------------------------------------------------------------------

    async def cancel_listener(self) -> None:
        """Forever: wake the run of a job whose id is published on the cancel channel, and have the run of a job
        whose id is published on the follow channel store its events at once (someone follows them)."""
        cancels, follows = self.store.keys.cancel_channel, self.store.keys.follow_channel
        while True:
            client = connections.async_client(self.settings)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(cancels, follows)
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    data, channel = message.get("data"), message.get("channel")
                    job_id = data.decode() if isinstance(data, bytes) else str(data)
                    channel = channel.decode() if isinstance(channel, bytes) else str(channel)
                    if not self.engine.handles(job_id):
                        continue
                    if channel == follows:
                        self.engine.follow(job_id)
                    else:
                        log.info("job %s: cancel requested", job_id)
                        self.engine.request_cancel(job_id)
            except asyncio.CancelledError:
                raise
            except (redis.RedisError, OSError) as exc:
                log.warning("cancel listener: %s; reconnecting (heartbeats re-check the flag)", type(exc).__name__)
                await asyncio.sleep(self.settings.loop_interval_s)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
                await client.aclose()
