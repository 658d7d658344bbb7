"""The engine: ONE asyncio loop per worker process, on a long-lived thread, hosting every run of the process.

Celery's task threads hand deliveries to it (`Engine.deliver_blocking`) and wait. Per delivery: claim (fenced lease)
-> heartbeat -> account slot -> run -> classify (failure) -> record the attempt -> fenced write -> release the
slot -> metrics. The CLI processes are spawned from the loop's thread, so their parent-death signal is tied to a
thread that lives as long as the worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Protocol, TypeVar, Unpack

import redis
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.errors import ConfigError, JobNotFound, PolicyViolation, RateLimited, RecordUnreadable
from claudeq.jobs import JobFields
from claudeq.models import (
    FREE_OUTCOMES,
    Attempt,
    ErrorKind,
    Event,
    JobError,
    JobRecord,
    JobResult,
    JobSpec,
    JobStatus,
    TerminalStatus,
    Usage,
    utcnow,
)
from claudeq.producer.validation import policy_problems
from claudeq.worker.account_choice import NoAccount
from claudeq.worker.failure import Decision, OutputCheck, decide
from claudeq.worker.job_store import WorkerJobStore
from claudeq.worker.metrics import primary_model
from claudeq.worker.outcome import RateLimitSignal, RunOutcome
from claudeq.worker.output_check import OutputCheckTimeout, schema_problem
from claudeq.worker.retry import DeferInstead, Step, StepKind, run_attempts
from claudeq.worker.session_planner import SessionPlanner

log = logging.getLogger("claudeq.engine")

T = TypeVar("T")
EventSink = Callable[[Event], Awaitable[None]]
#: Sends the `claudeq.run` message for a job (spec None: the record is unreadable, use the default queue).
Sender = Callable[[str, JobSpec | None], None]


class RunnerLike(Protocol):
    """claudeq.worker.runner.Runner as the engine uses it."""

    def check(self, spec: JobSpec) -> None: ...  # PolicyViolation when this worker's policy forbids the spec
    async def run(self, req: Any, emit: EventSink, cancel: asyncio.Event) -> RunOutcome: ...


class SlotLike(Protocol):
    """claudeq.worker.account_manager.SlotLease."""

    @property
    def account(self) -> AccountConfig: ...


class AccountsLike(Protocol):
    """claudeq.worker.account_manager.AccountManager as the engine uses it (sync; called in threads)."""

    def acquire(self, job_id: str, spec: JobSpec, exclude: frozenset[str] = ...) -> Any: ...
    def refresh(self, lease: Any, ttl_s: float) -> None: ...
    def release(self, lease: Any) -> list[str]: ...
    def add_waiter(self, accounts: list[str], job_id: str) -> None: ...
    def observe(self, account: str, signal: RateLimitSignal) -> None: ...
    def cool(self, account: str, until: Any, reason: str) -> None: ...
    def disable(self, account: str, reason: str) -> None: ...


class MetricsLike(Protocol):
    """claudeq.worker.metrics.WorkerMetrics as the engine uses it (never raises)."""

    def job_finished(self, queue: str, status: str) -> None: ...
    def attempt(self, account: str, outcome: str) -> None: ...
    def run_duration(self, account: str, model: str, seconds: float) -> None: ...
    def queue_wait(self, seconds: float) -> None: ...
    def run_started(self, account: str) -> None: ...
    def run_ended(self, account: str) -> None: ...
    def usage(self, account: str, usage: Usage) -> None: ...
    def rate_limit_event(self, account: str, signal: RateLimitSignal) -> None: ...
    def retry(self, reason: str) -> None: ...
    def tool_call(self, tool: str) -> None: ...
    def mirror_error(self) -> None: ...


def default_request_factory(**fields: Any) -> Any:
    """Build a claudeq.worker.runner.RunRequest (imported late: the runner pulls in the SDK)."""
    from claudeq.worker.runner import RunRequest

    return RunRequest(**fields)


@dataclass
class Delivery:
    """One delivery of a job being handled by this process."""

    job_id: str
    fence: int
    record: JobRecord
    attempts: list[Attempt]
    cancel: asyncio.Event = field(default_factory=asyncio.Event)  # stops the run / cuts a wait short
    why: str | None = None  # cancel | shutdown | lost: why `cancel` was set
    slot: Any = None  # the SlotLease held right now
    result: JobResult = field(default_factory=JobResult)  # latest (maybe partial) output
    session_id: str | None = None
    first_claim: bool = False  # the job's first claim ever (its queue wait ends here)
    #: Monotonic time before which the lease (and the account slot) are surely still ours: the send time of the
    #: claim, then of the last heartbeat that renewed both, plus the lease TTL.
    lease_until: float = 0.0
    urgent: asyncio.Event = field(default_factory=asyncio.Event)  # set with why=lost: kill the run at once

    @property
    def counted(self) -> int:
        """Attempts so far that count against max attempts."""
        return sum(1 for a in self.attempts if a.outcome is not None and a.outcome not in FREE_OUTCOMES)


def summed_usage(attempts: list[Attempt]) -> Usage:
    """The usage of all attempts together (the record's result.usage)."""
    total = Usage()
    for attempt in attempts:
        if attempt.usage is not None:
            total = total + attempt.usage
    return total


class Engine:
    """Hosts the runs of one worker process on one event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: WorkerJobStore,
        accounts: AccountsLike,
        runner: RunnerLike,
        metrics: MetricsLike,
        send: Sender,
        worker_id: str,
        sessions: SessionPlanner | None = None,
        request_factory: Callable[..., Any] = default_request_factory,
    ) -> None:
        self.settings = settings
        self.store = store
        self.accounts = accounts
        self.runner = runner
        self.metrics = metrics
        self.send = send
        self.worker_id = worker_id
        self.sessions = sessions or SessionPlanner()
        self.request_factory = request_factory
        #: Deliveries in hand, by (job id, fence): a job recovered and delivered back here while its old delivery is
        #: still stopping has two, and each one's end removes its own entry only.
        self.deliveries: dict[tuple[str, int], Delivery] = {}
        self.closing = False  # shutdown began: claim nothing new
        self.started_at = utcnow()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._sem: asyncio.Semaphore | None = None
        self._idle: asyncio.Event | None = None  # set while no delivery is in hand
        self._background: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._tasks: list[asyncio.Task[None]] = []

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def add_background(self, loop_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `loop_fn()` on the engine loop while it lives (call before start)."""
        self._background.append(loop_fn)

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run_loop, name="claudeq-engine", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        # Redis calls go through to_thread: size the pool for every run's heartbeat, events and writes at once.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=4 + 3 * self.settings.concurrency, thread_name_prefix="cq"
            )
        )
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._sem = asyncio.Semaphore(self.settings.concurrency)
        self._idle = asyncio.Event()
        self._idle.set()
        for loop_fn in self._background:
            self._tasks.append(loop.create_task(loop_fn()))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            for task in self._tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def stop(self, timeout_s: float = 10) -> None:
        """Stop the loop and its thread (runs should have ended: see shutdown)."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._thread = None

    def call(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the engine loop from any thread."""
        self.start()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def deliver_blocking(self, job_id: str) -> str:
        """Hand a delivery to the engine and wait until it is done with it (Celery task threads)."""
        return self.call(self.deliver(job_id)).result()

    @property
    def in_flight(self) -> int:
        """Deliveries being handled right now."""
        return len(self.deliveries)

    def handles(self, job_id: str) -> bool:
        """Whether a delivery of `job_id` (any fence) is in hand here."""
        return any(key[0] == job_id for key in self.deliveries)

    def request_cancel(self, job_id: str) -> None:
        """Stop the run of `job_id` if it runs here (thread-safe; the cancel listener calls it)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_by_id, job_id, "cancel")

    def _stop_by_id(self, job_id: str, why: str) -> None:
        for (held, _), delivery in list(self.deliveries.items()):
            if held == job_id:
                self._stop(delivery, why)

    @staticmethod
    def _stop(delivery: Delivery, why: str) -> None:
        if delivery.why is None:
            delivery.why = why
        delivery.cancel.set()

    def begin_shutdown(self, grace_s: float) -> concurrent.futures.Future[None]:
        """Stop claiming; let runs finish for `grace_s`, then stop the rest and re-enqueue their jobs."""
        return self.call(self.shutdown(grace_s))

    async def shutdown(self, grace_s: float) -> None:
        """See begin_shutdown; returns once no delivery is left."""
        if not self.closing:
            log.info("shutdown: no new work; %d run(s) in flight, grace %.0f s", len(self.deliveries), grace_s)
        self.closing = True
        assert self._idle is not None
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=grace_s)
        except TimeoutError:
            pass
        for delivery in list(self.deliveries.values()):
            self._stop(delivery, "shutdown")
        await self._idle.wait()

    def hurry(self) -> None:
        """Skip what is left of the grace period: stop every run now (second signal)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_all, "shutdown")

    def _stop_all(self, why: str) -> None:
        self.closing = True
        for delivery in list(self.deliveries.values()):
            self._stop(delivery, why)

    # ---- one delivery ----------------------------------------------------------------------------------------

    async def deliver(self, job_id: str) -> str:
        """Handle one delivery of `job_id`; returns what became of it. Never raises for job problems."""
        if self.closing:
            # Shutting down: hand the message back rather than start a run we would have to stop.
            log.info("job %s: delivery during shutdown, re-sent unclaimed", job_id)
            await self.resend(job_id)
            return "handed_back"
        assert self._sem is not None
        async with self._sem:
            return await self._deliver(job_id)

    async def _deliver(self, job_id: str) -> str:
        claim_sent = time.monotonic()
        try:
            claim = await asyncio.to_thread(self.store.claim, job_id, self.worker_id, self.settings.lease_ttl_s)
        except redis.RedisError as exc:
            log.warning("job %s: claim failed (%s); the reconciler re-sends it", job_id, type(exc).__name__)
            return "dropped:redis"
        if not claim.ok:
            # finished / deferred / queued-elsewhere / busy (fresh lease elsewhere) / orphan (reconciler) / missing
            log.info("job %s: delivery dropped (%s)", job_id, claim.result)
            return f"dropped:{claim.result}"
        try:
            record = await asyncio.to_thread(self.store.get, job_id)
        except RecordUnreadable as exc:
            log.error("job %s: record unreadable: %s", job_id, exc.detail)
            error = JobError(kind="internal", message=f"the job record cannot be read: {exc.detail}")
            await asyncio.to_thread(self.store.write, job_id, claim.fence, "failed", error=error)
            return "failed"
        except JobNotFound:
            log.info("job %s: vanished after claim", job_id)
            return "dropped:missing"
        delivery = Delivery(
            job_id, claim.fence, record, list(record.attempts), session_id=record.session_id, first_claim=claim.first
        )
        delivery.lease_until = claim_sent + self.settings.lease_ttl_s
        if record.result is not None:
            delivery.result = record.result
        key = (job_id, claim.fence)
        self.deliveries[key] = delivery
        assert self._idle is not None
        self._idle.clear()
        heartbeat = asyncio.create_task(self._heartbeat(delivery))
        guard = asyncio.create_task(self._lease_guard(delivery))
        try:
            return await self._handle(delivery)
        except redis.RedisError as exc:
            # Redis stayed unreachable through the retries: write nothing. The lease expires and the reconciler
            # re-enqueues the job (outcome worker_lost, not counted) instead of failing it for a broker blip.
            log.warning("job %s: Redis unavailable (%s); left to the reconciler", job_id, type(exc).__name__)
            self._stop(delivery, "lost")
            return "dropped:redis"
        except Exception:
            log.exception("job %s: internal error", job_id)
            await self._finish(delivery, "failed", JobError(kind="internal", message="internal worker error"))
            return "failed"
        finally:
            heartbeat.cancel()
            guard.cancel()
            await self._release(delivery)
            del self.deliveries[key]
            if not self.deliveries:
                self._idle.set()

    async def _handle(self, d: Delivery) -> str:
        spec = d.record.spec
        number = len(d.attempts) + 1
        await self._event(d, Event(type="claimed", attempt=number, data={"worker": self.worker_id, "attempt": number}))
        if d.first_claim:  # once per job: a job deferred before its first attempt is claimed again later
            self.metrics.queue_wait(max(0.0, (utcnow() - d.record.created_at).total_seconds()))
        problems = policy_problems(spec, self.settings)
        try:
            self.runner.check(spec)
        except PolicyViolation as exc:
            problems.append((exc.field, exc.reason))
        if problems:
            message = "refused by the worker policy: " + "; ".join(f"{f}: {r}" for f, r in problems)
            return await self._finish(d, "failed", JobError(kind="input", message=message))
        max_attempts = spec.max_attempts or self.settings.max_attempts

        async def on_retry(step: Step, wait_s: float, in_place: bool) -> None:
            self.metrics.retry(step.reason)
            data = {"reason": step.reason, "wait_s": round(wait_s, 3), "next_attempt": len(d.attempts) + 1}
            await self._event(d, Event(type="retry", data={**data, "in_place": in_place}))

        async def attempt() -> Step:
            return await self._attempt(d, max_attempts)

        try:
            step = await run_attempts(
                attempt,
                self.settings,
                counted=lambda: d.counted,
                max_passes=max_attempts + 2 * max(1, len(self.settings.accounts.names)) + 2,
                on_retry=on_retry,
                interrupt=d.cancel,
            )
        except DeferInstead as defer:
            if d.why is not None:
                return (await self._between_attempts(d)).status
            ready = utcnow() + timedelta(seconds=defer.wait_s)
            reason = f"a wait of {defer.wait_s:.1f} s is too long to sit out in place"
            return await self._defer(d, ready, reason, [])
        if step.kind != "done":
            # Rerouted more times than there are accounts: let the cooldowns play out in the deferred set.
            ready = utcnow() + timedelta(seconds=self.settings.rate_limit_cooldown_s)
            return await self._defer(d, ready, "no account could take the job after several reroutes", [])
        return step.status

    async def _attempt(self, d: Delivery, max_attempts: int) -> Step:
        if d.why is None and self.closing:
            self._stop(d, "shutdown")  # claimed just as the shutdown began: requeue rather than start a run
        if d.why is None and await asyncio.to_thread(self.store.cancel_requested, d.job_id):
            self._stop(d, "cancel")
        if d.why is not None:
            return await self._between_attempts(d)
        spec = d.record.spec
        plan = await self.sessions.plan(d.record, lambda event: self._event(d, event))
        if plan.error is not None:
            return Step("done", await self._finish(d, "failed", plan.error))
        if plan.wait is not None:  # another turn of the conversation comes first
            status = await self._defer(d, plan.wait.ready_at, plan.wait.reason, [])
            if status == "deferred" and await self.sessions.recheck(d.record):
                await self.promote_and_send(d.job_id, force=True)  # that turn ended while we deferred
            return Step("done", status)
        acquired = await asyncio.to_thread(self.accounts.acquire, d.job_id, spec, frozenset())
        if isinstance(acquired, NoAccount):
            if acquired.permanent:
                kind: ErrorKind = "account" if self.settings.accounts.names else "configuration"
                return Step("done", await self._finish(d, "failed", JobError(kind=kind, message=acquired.reason)))
            until_ready = (acquired.ready_at - utcnow()).total_seconds()
            if acquired.cooldown and until_ready <= self.settings.retry_in_place_max_s:
                # A cooldown about to end: sit it out in place (no slot held) rather than a round trip via deferral.
                account_name = acquired.accounts[0] if acquired.accounts else ""
                limited = RateLimited(account_name, acquired.ready_at, None)
                return Step("wait", reason="rate_limit", limited=limited)
            return Step("done", await self._defer(d, acquired.ready_at, acquired.reason, acquired.accounts))
        d.slot = acquired
        account: AccountConfig = acquired.account
        number = len(d.attempts) + 1
        attempt = Attempt(number=number, account=account.name, worker=self.worker_id, started_at=utcnow())
        d.attempts.append(attempt)
        if d.record.session_plan is None and self.sessions.enabled:
            # The first plan goes in the record with the attempt (fenced): the turn is recorded from it at the end.
            d.record = d.record.model_copy(update={"session_plan": plan.stored()})
            written = await self._write(d, account=account.name, attempts=d.attempts, session_plan=plan.stored())
        else:
            written = await self._write(d, account=account.name, attempts=d.attempts)
        if not written:
            return Step("done", "lost")
        request = self.request_factory(
            job_id=d.job_id,
            attempt=number,
            spec=spec if plan.prompt is None else spec.model_copy(update={"prompt": plan.prompt}),
            account=account,
            resume=plan.resume,
            fork=plan.fork,
            resume_at=plan.resume_at,
            session_store=plan.session_store,
            urgent=d.urgent,
        )
        outcome, refused = await self._run(d, request, account)
        if d.why == "lost":
            log.warning("job %s: lease lost during attempt %d; writing nothing", d.job_id, number)
            return Step("done", "lost")
        if refused is not None:
            d.attempts[-1] = attempt.model_copy(
                update={"outcome": "failed", "detail": refused.message, "finished_at": utcnow()}
            )
            self.metrics.attempt(account.name, "failed")
            return Step("done", await self._finish(d, "failed", refused))
        assert outcome is not None
        if outcome.stopped_by == "cancel" and d.why == "shutdown":
            # The run was stopped for the shutdown, not by a user: requeue it. A run that finished before the stop
            # took effect keeps its own outcome (a success is never thrown away and run again).
            outcome = replace(outcome, stopped_by="shutdown")
        decision = decide(
            outcome,
            account,
            d.counted,
            max_attempts,
            now=utcnow(),
            rate_limit_cooldown_s=self.settings.rate_limit_cooldown_s,
            output_schema=spec.output_schema,
            output_check=await self._check_output(spec, outcome),
        )
        await self._apply_account_effects(account, outcome, decision)
        d.attempts[-1] = attempt.model_copy(
            update={
                "outcome": decision.outcome,
                "detail": decision.detail,
                "session_id": outcome.session_id,
                "usage": outcome.result.usage,
                "finished_at": utcnow(),
            }
        )
        self.metrics.attempt(account.name, decision.outcome)
        self.metrics.usage(account.name, outcome.result.usage)
        d.result = outcome.result
        d.session_id = outcome.session_id or d.session_id
        await self._event(
            d, Event(type="attempt_finished", data={"outcome": decision.outcome, "detail": decision.detail})
        )
        return await self._act(d, decision)

    async def _run(
        self, d: Delivery, request: Any, account: AccountConfig
    ) -> tuple[RunOutcome | None, JobError | None]:
        """Run one attempt; (outcome, None), or (None, error) when the run was refused before it started."""
        self.metrics.run_started(account.name)
        started = time.monotonic()
        outcome: RunOutcome | None = None
        try:
            outcome = await self.runner.run(request, self._emitter(d, request.attempt, account.name), d.cancel)
            return outcome, None
        except PolicyViolation as exc:
            return None, JobError(kind="input", message=f"refused by the worker policy: {exc}")
        except ConfigError as exc:
            return None, JobError(kind="configuration", message=str(exc))
        finally:
            self.metrics.run_ended(account.name)
            # Label by the model that actually answered (canonical id), not the alias the spec asked for.
            model = primary_model(outcome.result.usage if outcome else None) or d.record.spec.model or "default"
            self.metrics.run_duration(account.name, model, time.monotonic() - started)

    async def _check_output(self, spec: JobSpec, outcome: RunOutcome) -> OutputCheck | None:
        """Check a structured output against the job's schema in its own process, with a deadline: never on this
        loop (a backtracking `pattern` would hold the GIL and stop every heartbeat of the worker)."""
        data = outcome.result.structured_output
        if spec.output_schema is None or data is None or not outcome.got_result or outcome.is_error:
            return None
        timeout_s = self.settings.output_check_timeout_s
        try:
            return OutputCheck(problem=await schema_problem(data, spec.output_schema, timeout_s))
        except OutputCheckTimeout:
            return OutputCheck(timed_out=f"{timeout_s:g} s")

    async def _apply_account_effects(self, account: AccountConfig, outcome: RunOutcome, decision: Decision) -> None:
        for signal in outcome.rate_limits:
            self.metrics.rate_limit_event(account.name, signal)
            await self._quiet(self.accounts.observe, account.name, signal)
        if decision.cool_until is not None:
            await self._quiet(self.accounts.cool, account.name, decision.cool_until, decision.detail)
        if decision.disable_reason is not None:
            log.warning("account %s disabled: %s", account.name, decision.disable_reason)
            await self._quiet(self.accounts.disable, account.name, decision.disable_reason)

    async def _act(self, d: Delivery, decision: Decision) -> Step:
        if decision.action == "succeed":
            status = await self._finish(d, "succeeded")
            if status == "succeeded":
                self.sessions.after_success(d.record, d.session_id)
            return Step("done", status)
        if decision.action in ("fail", "cancel"):
            assert decision.error is not None
            return Step(
                "done", await self._finish(d, "failed" if decision.action == "fail" else "cancelled", decision.error)
            )
        if decision.action == "requeue":
            return Step("done", await self._requeue(d, decision.detail))
        # retry / reroute: record the attempt, free the slot (a wait never holds it), go round again.
        if not await self._write(d, attempts=d.attempts, result=self._result(d), session_id=d.session_id):
            return Step("done", "lost")
        await self._release(d)
        kind: StepKind = "retry" if decision.action == "retry" else "reroute"
        return Step(kind, reason=decision.retry_reason or decision.outcome)

    async def _between_attempts(self, d: Delivery) -> Step:
        """No run in flight and the delivery was stopped: act on why."""
        if d.why == "cancel":
            error = JobError(kind="cancelled", message="cancelled by request")
            return Step("done", await self._finish(d, "cancelled", error))
        if d.why == "shutdown":
            return Step("done", await self._requeue(d, "worker shutting down; job re-enqueued"))
        return Step("done", "lost")

    # ---- writes ----------------------------------------------------------------------------------------------

    def _result(self, d: Delivery) -> JobResult:
        return d.result.model_copy(update={"usage": summed_usage(d.attempts)})

    async def _write(
        self, d: Delivery, status: JobStatus | None = None, event: Event | None = None, **fields: Unpack[JobFields]
    ) -> bool:
        if d.why == "lost":
            return False
        if event is not None and event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        tries = 0
        ok = False
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((redis.ConnectionError, redis.TimeoutError)),
            wait=wait_exponential(multiplier=0.1, max=2),
            stop=stop_after_delay(max(1.0, self.settings.lease_ttl_s / 2)),
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
        return bool(ok)

    def _write_once(self, d: Delivery, status: JobStatus | None, event: Event | None, fields: JobFields) -> bool:
        return self.store.write(d.job_id, d.fence, status, event=event, **fields)

    def _landed(self, d: Delivery, status: str | None) -> bool:
        fence, current = self.store.fence_and_status(d.job_id)
        if fence is None or fence != d.fence:
            return False
        return status is None or current == status

    async def _finish(self, d: Delivery, status: TerminalStatus, error: JobError | None = None) -> str:
        """Write a terminal status (fenced); returns the status, or `lost` when the fence was stale."""
        data: dict[str, Any] = {"kind": error.kind, "message": error.message} if error else {}
        ok = await self._write(
            d,
            status,
            Event(type=status, data=data),  # in the fenced write: no terminal event from a run that lost the job
            attempts=d.attempts,
            result=self._result(d),
            session_id=d.session_id,
            error=error,
        )
        await self._release(d)
        if not ok:
            return "lost"
        try:
            waiting = await self.sessions.finished(d.record, status, d.session_id)
        except Exception:
            log.exception("job %s: conversation bookkeeping failed", d.job_id)
            waiting = []
        for job_id in waiting:
            await self.promote_and_send(job_id, force=True)
        self.metrics.job_finished(d.record.spec.queue or self.settings.queue, status)
        log.info(
            "job %s: %s after %d attempt(s)%s", d.job_id, status, len(d.attempts), f" ({error.kind})" if error else ""
        )
        return status

    async def _defer(self, d: Delivery, ready_at: Any, reason: str, accounts: list[str]) -> str:
        await self._release(d)
        ok = await self._write(
            d,
            "deferred",
            Event(type="deferred", data={"ready_at": ready_at.isoformat(), "reason": reason}),
            ready_at=ready_at,
            attempts=d.attempts,
            result=self._result(d),
            session_id=d.session_id,
        )
        if not ok:
            return "lost"
        if accounts:
            await self._quiet(self.accounts.add_waiter, accounts, d.job_id)
        log.info("job %s: deferred until %s (%s)", d.job_id, ready_at.isoformat(), reason)
        return "deferred"

    async def _requeue(self, d: Delivery, reason: str) -> str:
        await self._release(d)
        requeued = Event(type="requeued", data={"reason": reason})
        if not await self._write(
            d, "queued", requeued, attempts=d.attempts, result=self._result(d), session_id=d.session_id
        ):
            return "lost"
        await self._send(d.job_id, d.record.spec)
        log.info("job %s: requeued (%s)", d.job_id, reason)
        return "requeued"

    async def _release(self, d: Delivery) -> None:
        slot, d.slot = d.slot, None
        if slot is None or d.why == "lost":
            # A worker that lost the job must not touch it: the new owner may hold this very slot (members are job
            # ids); ours expires on its own when the heartbeat stops refreshing it.
            return
        try:
            waiters = await asyncio.to_thread(self.accounts.release, slot)
        except Exception:
            log.exception("job %s: releasing the account slot failed (it expires on its own)", d.job_id)
            return
        for job_id in waiters:
            await self.promote_and_send(job_id, force=True)

    # ---- helpers shared with the background loops ------------------------------------------------------------

    async def promote_and_send(self, job_id: str, force: bool = False) -> bool:
        """Move a deferred job back to the queue (atomic, once across workers) and send its message."""
        if not await asyncio.to_thread(self.store.promote, job_id, None, force):
            return False
        await self.resend(job_id)
        return True

    async def resend(self, job_id: str) -> None:
        """Send a job's message again (spec from its record; the default queue when it cannot be read)."""
        spec: JobSpec | None
        try:
            spec = (await asyncio.to_thread(self.store.get, job_id)).spec
        except JobNotFound:
            return
        except RecordUnreadable:
            spec = None
        await self._send(job_id, spec)

    async def _send(self, job_id: str, spec: JobSpec | None) -> None:
        try:
            await asyncio.to_thread(self.send, job_id, spec)
        except Exception:
            log.exception("job %s: sending its message failed; the reconciler re-sends it", job_id)

    async def _heartbeat(self, d: Delivery) -> None:
        """Extend the lease (and the account slot); a lost lease stops the run. Also catches missed cancels. Each
        renewal moves `d.lease_until`, which `_lease_guard` watches without waiting on Redis."""
        ttl = self.settings.lease_ttl_s
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            try:
                sent = time.monotonic()
                ours = await asyncio.to_thread(self.store.heartbeat, d.job_id, self.worker_id, d.fence, ttl)
                last_ok = time.monotonic()
                if not ours:
                    log.warning("job %s: lease lost (expired or taken over); stopping the run", d.job_id)
                    self._lose(d)
                    return
                if d.slot is not None:
                    await asyncio.to_thread(self.accounts.refresh, d.slot, ttl)
                d.lease_until = max(d.lease_until, sent + ttl)
                if d.why is None and await asyncio.to_thread(self.store.cancel_requested, d.job_id):
                    self._stop(d, "cancel")
            except redis.RedisError as exc:
                if time.monotonic() - last_ok >= ttl - self.settings.heartbeat_s:
                    # Cut off from Redis for about a lease: another worker may recover the job any moment. Stop
                    # our run now so the job never runs twice at once (the fence only guards the writes).
                    log.warning("job %s: no heartbeat for %.0f s (%s); stopping the run", d.job_id, ttl, exc)
                    self._lose(d)
                    return
                log.warning("job %s: heartbeat failed (%s); retrying", d.job_id, type(exc).__name__)

    def _lose(self, d: Delivery) -> None:
        """The job is (or is about to be) no longer ours: stop the run at once, write nothing, free nothing."""
        self._stop(d, "lost")
        d.why = "lost"
        d.urgent.set()

    def lease_margin_s(self) -> float:
        """How long before the lease could expire the guard stops the run: time to SIGKILL the run's processes, with
        room for a loaded machine, while leaving the heartbeats of a healthy worker several tries (15 s TTL: 3 s)."""
        return max(0.5, self.settings.lease_ttl_s / 5)

    async def _lease_guard(self, d: Delivery) -> None:
        """Stop the run before its lease or account slot can expire, on this process's monotonic clock alone: a
        heartbeat stuck in a Redis call (a frozen network) cannot renew them, and cannot be relied on to notice.
        The delivery is then `lost`: it writes nothing and frees nothing (another worker may hold the job and the
        slot by the time the lease is gone)."""
        margin = self.lease_margin_s()
        while True:
            left = d.lease_until - margin - time.monotonic()
            if left <= 0:
                if d.why != "lost":
                    log.warning(
                        "job %s: lease not renewed in time (Redis unreachable?); stopping the run %.1f s before it "
                        "can expire",
                        d.job_id,
                        max(0.0, d.lease_until - time.monotonic()),
                    )
                    self._lose(d)
                return
            await asyncio.sleep(left)

    def _emitter(self, d: Delivery, attempt: int, account: str) -> EventSink:
        async def emit(event: Event) -> None:
            if event.attempt is None:
                event = event.model_copy(update={"attempt": attempt})
            if event.type == "tool_call":
                self.metrics.tool_call(str(event.data.get("tool", "")))
            elif event.type == "mirror_error":
                self.metrics.mirror_error()
            elif event.type == "session" and event.data.get("session_id"):
                d.session_id = str(event.data["session_id"])
            await self._event(d, event)

        return emit

    async def _event(self, d: Delivery, event: Event) -> None:
        if d.why == "lost":
            return
        if event.attempt is None and d.attempts:
            event = event.model_copy(update={"attempt": len(d.attempts)})
        try:
            stored = await asyncio.to_thread(self.store.append_event_fenced, d.job_id, d.fence, event)
        except redis.RedisError as exc:
            log.warning("job %s: event %s not stored (%s)", d.job_id, event.type, type(exc).__name__)
            return
        if stored is None and d.why != "lost":
            # The fence no longer holds the job: another worker owns it. Stop, and write nothing more.
            log.warning("job %s: stale fence %d, event refused (another worker owns the job)", d.job_id, d.fence)
            d.why = "lost"
            d.cancel.set()

    async def _quiet(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call a sync account-state method in a thread; a failure is logged, never fatal to the job."""
        try:
            await asyncio.to_thread(fn, *args)
        except Exception:
            log.exception("account update %s failed", getattr(fn, "__name__", fn))
