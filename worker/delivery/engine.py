"""The engine: hosts every run of one worker process on ONE asyncio loop, on a long-lived thread (LoopHost).

Celery's task threads hand deliveries to it (`Engine.deliver_blocking`) and wait. Per delivery: claim (fenced lease)
-> lease heartbeat (`lease`) -> the delivery state machine (`handler`, which ends the delivery and gives its slot
back) -> the heartbeat stopped. Shutdown stops claiming, lets runs finish for a grace period, then requeues the rest.
The delivery's walk, step by step: docs/architecture.md#the-delivery-walk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis

from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.jobs import INDEXED_FIELD, parse_record
from claudeq.models import JobError, utcnow

from ...config.settings import Settings
from ...config.tenants import DEFAULT_TENANT
from ..loop_host import Background, LoopHost
from ..store.job_store import JobWrite, WorkerJobStore
from .dispatch import Dispatch
from .fenced import FencedWriter
from .handler import DeliveryHandler
from .lease import LeaseKeeper
from .ports import Ports, Sender
from .session_planner import SessionPlanner
from .state import Delivered, Delivery, EventBuffer, Lease, SlotHold

log = logging.getLogger("claudeq.engine")

T = TypeVar("T")


def engine_executor_workers(concurrency: int) -> int:
    """Calls to Redis the engine may have in flight at once: one heartbeat, one event flush and one write per run,
    and the background loops. The size of each of the worker's connection pools (claudeq.worker.app.build_runtime)
    and of the engine loop's default executor (the runs' own blocking work; sync Redis calls have REDIS_THREADS)."""
    return 4 + 3 * concurrency


class Engine:
    """Hosts the runs of one worker process on one event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: WorkerJobStore,
        ports: Ports,
        send: Sender,
        worker_id: str,
        sessions: SessionPlanner | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.accounts = accounts = ports.accounts
        self.runner = ports.runner
        self.metrics = ports.metrics
        self.worker_id = worker_id
        self.sessions = sessions or SessionPlanner()
        self.started_at = utcnow()
        self.dispatch = Dispatch(store, accounts, send)
        self.writer = FencedWriter(
            store,
            settings.lease_ttl_s,
            idle_linger_s=settings.event_flush_s,
            pack_events=settings.event_codec == "zlib",
        )
        self.lease = LeaseKeeper(
            store, accounts, worker_id=worker_id, lease_ttl_s=settings.lease_ttl_s, heartbeat_s=settings.heartbeat_s
        )
        self.handler = DeliveryHandler(
            settings,
            ports=ports,
            sessions=self.sessions,
            writer=self.writer,
            dispatch=self.dispatch,
            worker_id=worker_id,
            closing=lambda: self._closing,
        )
        self.host = LoopHost(
            executor_workers=engine_executor_workers(settings.concurrency),
            on_start=self._on_loop_start,
            on_stop=store.aclose,
        )
        #: Deliveries in hand, by (job id, fence): a job recovered and delivered back here while its old delivery is
        #: still stopping has two, and each one's end removes its own entry only.
        self._deliveries: dict[tuple[str, int], Delivery] = {}
        self._closing = False  # shutdown began: claim nothing new
        self._sem: asyncio.Semaphore | None = None
        self._idle: asyncio.Event | None = None  # set while no delivery is in hand

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def _on_loop_start(self) -> None:
        self._sem = asyncio.Semaphore(self.settings.concurrency)
        self._idle = asyncio.Event()
        self._idle.set()

    def add_background(self, loop_fn: Background) -> None:
        """Run `loop_fn()` on the engine loop while it lives (call before start)."""
        self.host.add_background(loop_fn)

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        self.host.start()

    def stop(self, timeout_s: float = 10) -> None:
        """Stop the loop and its thread (runs should have ended: see shutdown)."""
        self.host.stop(timeout_s)

    def call(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the engine loop from any thread (starting it if needed)."""
        return self.host.call(coro)

    def deliver_blocking(self, job_id: str) -> Delivered:
        """Hand a delivery to the engine and wait until it is done with it (Celery task threads)."""
        return self.host.call(self.deliver(job_id)).result()

    @property
    def closing(self) -> bool:
        """Whether shutdown began (nothing new is claimed)."""
        return self._closing

    @property
    def in_flight(self) -> int:
        """Deliveries being handled right now."""
        return len(self._deliveries)

    def handles(self, job_id: str) -> bool:
        """Whether a delivery of `job_id` (any fence) is in hand in this process."""
        return any(key[0] == job_id for key in self._deliveries)

    def lease_margin_s(self) -> float:
        """How long before the lease could expire the guard stops the run: time for the CLI to stop."""
        return self.lease.margin_s()

    def request_cancel(self, job_id: str) -> None:
        """Stop the run of `job_id` if it runs here (thread-safe; the cancel listener calls it)."""
        self.host.call_soon(self._stop_by_id, job_id)

    def follow(self, job_id: str) -> None:
        """Someone follows `job_id`'s events: if it runs here, store them within 0.1 s for a while (thread-safe; the
        follow listener calls it)."""
        self.host.call_soon(self._follow_by_id, job_id)

    def _follow_by_id(self, job_id: str) -> None:
        for (held, _), delivery in list(self._deliveries.items()):
            if held == job_id:
                self.writer.followed(delivery)

    def _stop_by_id(self, job_id: str) -> None:
        for (held, _), delivery in list(self._deliveries.items()):
            if held == job_id:
                delivery.stop("cancel")

    def begin_shutdown(self, grace_s: float) -> concurrent.futures.Future[None]:
        """Stop claiming; let runs finish for `grace_s`, then stop the rest and re-enqueue their jobs."""
        return self.host.call(self.shutdown(grace_s))

    async def shutdown(self, grace_s: float) -> None:
        """See begin_shutdown; returns once no delivery is left."""
        if not self._closing:
            log.info("shutdown: no new work; %d run(s) in flight, grace %.0f s", len(self._deliveries), grace_s)
        self._closing = True
        assert self._idle is not None
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=grace_s)
        except TimeoutError:
            pass
        for delivery in list(self._deliveries.values()):
            delivery.stop("shutdown")
        await self._idle.wait()

    def hurry(self) -> None:
        """Skip what is left of the grace period: stop every run now (second signal)."""
        self.host.call_soon(self._stop_all)

    def _stop_all(self) -> None:
        self._closing = True
        for delivery in list(self._deliveries.values()):
            delivery.stop("shutdown")

    # ---- helpers shared with the background loops ------------------------------------------------------------

    async def promote_and_send(self, job_id: str, force: bool = False) -> bool:
        """Move a deferred job back to the queue (atomic, once across workers) and send its message."""
        return await self.dispatch.promote_and_send(job_id, force)

    async def resend(self, job_id: str) -> None:
        """Send a job's message again (spec from its record; the default queue when it cannot be read)."""
        await self.dispatch.resend(job_id)

    # ---- one delivery ----------------------------------------------------------------------------------------

    async def deliver(self, job_id: str) -> Delivered:
        """Handle one delivery of `job_id`; returns what became of it. Never raises for job problems."""
        if self._closing:
            # Shutting down: hand the message back rather than start a run we would have to stop.
            log.info("job %s: delivery during shutdown, re-sent unclaimed", job_id)
            await self.resend(job_id)
            return Delivered("handed_back")
        assert self._sem is not None
        async with self._sem:
            return await self._deliver(job_id)

    async def _deliver(self, job_id: str) -> Delivered:
        claim_sent = time.monotonic()
        try:
            claim = await self.store.send(self.store.claim_call(job_id, self.worker_id, self.settings.lease_ttl_s))
        except redis.RedisError as exc:
            log.warning("job %s: claim failed (%s); the reconciler re-sends it", job_id, type(exc).__name__)
            return Delivered.dropped("redis")
        if not claim.ok:
            # finished / deferred / queued-elsewhere / busy (fresh lease elsewhere) / orphan (reconciler) / missing
            log.info("job %s: delivery dropped (%s)", job_id, claim.result)
            return Delivered.dropped(claim.result)
        try:
            # The claim read the record in the same step; an older store's claim did not.
            record = (
                parse_record(job_id, claim.fields) if claim.fields is not None else await self.store.reads.get(job_id)
            )
        except RecordUnreadable as exc:
            log.error("job %s: record unreadable: %s", job_id, exc.detail)
            error = JobError(kind="internal", message=f"the job record cannot be read: {exc.detail}")
            if await self.store.send(self.store.write_call(JobWrite(job_id, claim.fence, "failed", {"error": error}))):
                try:  # out of its tenant's active jobs: the tenant its damaged spec still names, else `default`
                    await self.accounts.admission.job_done(_tenant_hint(claim.fields), job_id)
                except Exception:
                    log.exception("job %s: tenant bookkeeping failed", job_id)
            return Delivered("failed")
        except JobNotFound:
            log.info("job %s: vanished after claim", job_id)
            return Delivered.dropped("missing")
        delivery = Delivery(
            job_id,
            Lease(claim.fence, until=claim_sent + self.settings.lease_ttl_s),
            record,
            list(record.attempts),
            session_id=record.session_id,
            first_claim=claim.first,
            # Before its first claim a job has no events but `submitted` (from the record): no stream to read.
            events=EventBuffer(stream=not claim.first),
        )
        if record.result is not None:
            delivery.result = record.result
        if claim.fields is not None:
            delivery.hold = SlotHold(
                may_hold=frozenset(claim.fields[f] for f in ("slot", "account") if claim.fields.get(f)),
                indexed=bool(claim.fields.get(INDEXED_FIELD)),
            )
        if claim.cancelled is not None:
            delivery.cancel_known = True
            if claim.cancelled:
                delivery.stop("cancel")
        key = (job_id, claim.fence)
        self._deliveries[key] = delivery
        assert self._idle is not None
        self._idle.clear()
        watch = self.lease.watch(delivery)  # the heartbeat and the guard
        try:
            # The handler ends the delivery whatever happens (its slot given back, once): nothing here calls it again.
            return await self.handler.handle(delivery)
        finally:
            watch.stop()
            await self.writer.close(delivery)
            del self._deliveries[key]
            if not self._deliveries:
                self._idle.set()


#: The tenant a job's spec names, read from its raw JSON text (the spec may not parse).
_TENANT_IN_SPEC = re.compile(r'"tenant"\s*:\s*"([A-Za-z0-9][A-Za-z0-9_.-]{0,62})"')


def _tenant_hint(fields: dict[str, str] | None) -> str:
    """The tenant an unreadable record's spec names, if it can still be read; else `default`."""
    found = _TENANT_IN_SPEC.search((fields or {}).get("spec", ""))
    return found.group(1) if found else DEFAULT_TENANT
