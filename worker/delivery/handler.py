"""The delivery state machine: what happens to a claimed job, from the permission check to the status it ends in.

Per delivery: permission check -> attempts (session plan -> account slot -> run -> classify with the failure policy
-> record the attempt) with retries in between (`retry`) -> a terminal status, a deferral or a requeue, each written
through the delivery's fence (`fenced`). This is the one place a job's status changes on the worker side; the
decision to retry is `failure`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal, ParamSpec

import redis

from claudeq import dependencies, tracing
from claudeq.errors import ConfigError, PolicyViolation
from claudeq.events import (
    ApprovalDecided,
    AttemptFinished,
    Claimed,
    Deferred,
    MirrorError,
    Requeued,
    RetryScheduled,
    SessionStarted,
    ToolCalled,
    data_of,
    ended,
)
from claudeq.jobs import JobFields
from claudeq.models import (
    ApprovalDecision,
    Attempt,
    ErrorKind,
    Event,
    JobError,
    JobResult,
    JobSpec,
    PendingApproval,
    TerminalStatus,
    utcnow,
)
from claudeq.permissions import run_problems
from claudeq.tracing import NO_SPAN, SpanLike

from ...config.account_pool import AccountConfig
from ...config.settings import Settings
from ..accounts.choice import NoAccount
from ..accounts.manager import SlotLease, Spent, StartLost
from ..accounts.waiting_line import rank, tenant_rank
from ..loop_host import in_redis_thread
from ..metrics.labels import primary_model
from ..run.approval import ApprovalGate, denial, resume_prompt, rules_for
from ..run.outcome import EventSink, RunnerLike, RunOutcome, RunRequest
from ..run.output_check import OutputCheckTimeout, schema_problem, storable, unstorable
from ..store.approvals import ApprovalCalls
from ..store.concurrency_keys import ConcurrencyKeys
from ..store.job_store import CANCEL_ERROR, CANCELLED, AttemptStart, Freed
from ..workspace.worktree import WorkspaceProblem, worktree_path
from .artifacts import keep_outputs
from .dispatch import Dispatch
from .failure import Decision, OutputCheck, OutputReview, decide
from .fenced import FencedWriter
from .key_gate import KeyGate
from .ports import AccountsLike, MetricsLike, Ports
from .retry import AttemptLoop, DeferInstead, Step, StepKind
from .session_planner import SessionPlan, SessionPlanner
from .state import Delivered, Delivery, Finish, summed_usage
from .waits import Cooldown
from .workspaces import Workspaces

log = logging.getLogger("claudeq.engine")
#: `gen_ai.agent.name` of the attempts' spans (the GenAI conventions' `invoke_agent {gen_ai.agent.name}`).
AGENT_NAME = "claudeq"

P = ParamSpec("P")


@dataclass(frozen=True)
class AttemptSetup:
    """One attempt as `DeliveryHandler._attempt` sets it up, before it takes a slot: the job's spec (with the budget
    the slot grants, once it has one), its session plan, its start as data (written in the slot's script when
    `together`, else apart once the slot is taken), the accounts where it may hold a slot already (`holds`; None:
    wherever), the attempts the job may have, and the attempt's span."""

    spec: JobSpec
    plan: SessionPlan
    start: AttemptStart
    holds: frozenset[str] | None
    together: bool
    max_attempts: int
    span: SpanLike


class DeliveryHandler:
    """Carries one claimed delivery through its attempts to the status it ends in."""

    def __init__(
        self,
        settings: Settings,
        *,
        ports: Ports,
        sessions: SessionPlanner,
        writer: FencedWriter,
        dispatch: Dispatch,
        worker_id: str,
        closing: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.store = writer.store
        self.approval_calls = ApprovalCalls(self.store)
        self.accounts: AccountsLike = ports.accounts
        self.runner: RunnerLike = ports.runner
        self.metrics: MetricsLike = ports.metrics
        self.sessions = sessions
        self.writer = writer
        self.dispatch = dispatch
        self.worker_id = worker_id
        self.closing = closing
        self.workspaces = Workspaces(settings, writer)
        self.key_gate = KeyGate(settings, ConcurrencyKeys(self.store, self.store.keys), dispatch)

    async def handle(self, d: Delivery) -> Delivered:
        """Carry a claimed delivery to its end; returns what became of it. Never raises for job problems: an internal
        error fails the job, Redis unreachable leaves it to the reconciler. The delivery's slot is given back on
        every path, once."""
        try:
            return Delivered(await self._traced(d))
        except redis.RedisError as exc:
            # Redis stayed unreachable through the retries: write nothing. The lease expires and the reconciler
            # re-enqueues the job (outcome worker_lost, not counted) instead of failing it for a broker blip.
            log.warning("job %s: Redis unavailable (%s); left to the reconciler", d.job_id, type(exc).__name__)
            d.stop("lost")
            return Delivered.dropped("redis")
        except Exception:
            log.exception("job %s: internal error", d.job_id)
            error = JobError(kind="internal", message="internal worker error")
            if unstorable(d.result) is not None:  # the failure's own write must not fail for the same reason
                d.result = storable(d.result)
            await self.finish(d, "failed", error)
            return Delivered("failed")
        finally:
            if d.hold.slot is not None:  # a path that ended on a stale fence: dropped if lost, else given back
                await self.dispatch.release(d)

    async def _traced(self, d: Delivery) -> Finish:
        """The delivery's attempts under its trace span; the status it ended in (or `lost`)."""
        if not tracing.enabled():
            return await self._handle(d)
        d.trace = tracing.delivery_span(d.record, d.first_claim, self.worker_id)
        try:
            with d.trace.current():
                status = await self._handle(d)
            d.trace.set(status=status)
            if status in ("failed", "lost"):
                d.trace.fail(status)
            return status
        except BaseException as exc:
            d.trace.fail(type(exc).__name__)
            raise
        finally:
            d.trace.end()

    async def _handle(self, d: Delivery) -> Finish:
        spec = d.record.spec
        number = len(d.attempts) + 1
        self.writer.event(d, Claimed(worker=self.worker_id, attempt=number).event(number))
        if d.first_claim:  # once per job: a job deferred before its first attempt is claimed again later
            self.metrics.queue_wait(max(0.0, (utcnow() - d.record.created_at).total_seconds()))
        problems = run_problems(spec, self.settings)
        try:
            self.runner.check(spec)
        except PolicyViolation as exc:
            problems.append((exc.field, exc.reason))
        if problems:
            message = "refused by the worker policy: " + "; ".join(f"{f}: {r}" for f, r in problems)
            return await self.finish(d, "failed", JobError(kind="input", message=message))
        if spec.depends_on:  # released by its dependencies' ends: they decide, and their results fill the prompt
            settled = dependencies.settle(spec, await self.store.reads.records(spec.depends_on))
            if isinstance(settled, JobError):
                return await self.finish(d, "failed", settled)
            if settled != spec.prompt:
                spec = spec.model_copy(update={"prompt": settled})
                d.record = d.record.model_copy(update={"spec": spec})
        if spec.workspace is not None:  # its own worktree is its cwd (docs/jobs.md#coding-jobs)
            try:
                path = worktree_path(d.record, self.settings)
            except WorkspaceProblem as exc:
                return await self.finish(d, "failed", JobError(kind="workspace", message=str(exc)))
            spec = spec.model_copy(update={"cwd": str(path)})
            d.record = d.record.model_copy(update={"spec": spec})
        max_attempts = spec.max_attempts or self.settings.max_attempts

        # The attempt loop: one attempt per pass, the retry policy's wait between them (worker/delivery/retry.py).
        passes = AttemptLoop(
            self.settings,
            counted=lambda: d.counted,
            max_passes=max_attempts + 2 * max(1, len(self.settings.accounts.names)) + 2,
        )
        try:
            step = await self._attempt(d, max_attempts)
            while (wait_s := passes.next_wait(step)) is not None:
                if step.kind in ("retry", "wait"):
                    await self._retry_scheduled(d, step, wait_s, passes.in_place(wait_s))
                await passes.pause(wait_s, d.cancel)
                step = await self._attempt(d, max_attempts)
        except DeferInstead as defer:
            if d.why is not None:
                return (await self._between_attempts(d)).done
            ready = utcnow() + timedelta(seconds=defer.wait_s)
            reason = f"a wait of {defer.wait_s:.1f} s is too long to sit out in place"
            return await self._defer(d, ready, reason, [])
        if step.kind != "done":
            # Rerouted more times than there are accounts: let the cooldowns play out in the deferred set.
            ready = utcnow() + timedelta(seconds=self.settings.rate_limit_cooldown_s)
            return await self._defer(d, ready, "no account could take the job after several reroutes", [])
        return step.done

    async def _retry_scheduled(self, d: Delivery, step: Step, wait_s: float, in_place: bool) -> None:
        """A retry (or a rate-limit wait) comes after `wait_s`: its metric, its trace event and its event."""
        self.metrics.retry(step.reason)
        d.trace.event("retry", reason=step.reason, wait_s=round(wait_s, 3), in_place=in_place)
        retry = RetryScheduled(
            reason=step.reason, wait_s=round(wait_s, 3), next_attempt=len(d.attempts) + 1, in_place=in_place
        )
        self.writer.event(d, retry.event())

    async def _attempt(self, d: Delivery, max_attempts: int) -> Step:
        if d.why is None and self.closing():
            d.stop("shutdown")  # claimed just as the shutdown began: requeue rather than start a run
        if d.cancel_known:
            d.cancel_known = False  # the claim just read the flag; later attempts ask again
        elif d.why is None and (await self.store.lease_state(d.job_id)).cancel_requested:
            d.stop("cancel")
        if d.why is not None:
            return await self._between_attempts(d)
        spec = d.record.spec
        if len(d.record.attempts) != len(d.attempts):  # the planner reads the attempts of this delivery too
            d.record = d.record.model_copy(update={"attempts": list(d.attempts)})
        plan = await self.sessions.plan(d.record, lambda event: self.event(d, event))
        if plan.error is not None:
            return Step.finished(await self.finish(d, "failed", plan.error))
        if plan.wait is not None:  # another turn of the conversation comes first
            status = await self._defer(d, plan.wait.ready_at, plan.wait.reason, [])
            if status == "deferred" and await self.sessions.recheck(d.record):
                await self.dispatch.promote_and_send(d.job_id, force=True)  # that turn ended while we deferred
            return Step.finished(status)
        d.unparked = None
        if spec.concurrency_key is not None:  # its key first: a job waiting for it holds no account slot
            why = await self.key_gate.enter(d, spec, await self._rank(d))
            if why is not None:
                ready = utcnow() + timedelta(seconds=self.settings.concurrency_recheck_s)
                status = await self._defer(d, ready, why, [])
                if status == "deferred" and await self.key_gate.recheck(d, spec, await self._rank(d)):
                    await self.dispatch.promote_and_send(d.job_id, force=True)  # its holders ended meanwhile
                return Step.finished(status)
        pending = d.record.approval
        if pending is not None and pending.parked and pending.fence != d.lease.fence:
            unparked = await self._unpark(d, pending)
            if isinstance(unparked, Step):
                return unparked
            d.unparked = unparked
            if plan.resume is not None:  # the decision is the resumed session's next prompt
                plan = replace(plan, prompt=resume_prompt(unparked, spec.approval_timeout_s))
        # Where it may hold a slot already (handed over by the waiting line, or left by an attempt): only there.
        holds = None if d.hold.may_hold is None else d.hold.may_hold | {a.account for a in d.attempts if a.account}
        number = len(d.attempts) + 1
        # The first plan goes in the record with the attempt (fenced): the turn is recorded from it at the end.
        first_plan = d.record.session_plan is None and self.sessions.enabled
        # The attempt's start: written in the slot's own script (START) when it can, with the first plan if any.
        start = self.store.attempt_start(
            d.job_id,
            d.lease.fence,
            number,
            self.worker_id,
            d.attempts,
            spec.max_budget_usd,
            plan.stored() if first_plan else None,
        )
        # While someone follows the job the start's write stores the waiting events too: then it goes apart.
        together = not d.lost and not self.writer.followed_now(d)
        span = d.trace.child(f"invoke_agent {AGENT_NAME}", job_id=d.job_id, tenant=spec.tenant, attempt=number)
        span.set_raw(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": spec.model,
            }
        )
        setup = AttemptSetup(spec, plan, start, holds, together, max_attempts, span)
        try:
            with span.current():
                step = await self._attempt_traced(d, setup)
            span.set(step=step.kind, status=step.status)
            if step.kind == "reroute":  # to another account at once (a `retry` or a rate-limit `wait` is on_retry's)
                d.trace.event(
                    "reroute", reason=step.reason, from_account=d.attempts[-1].account if d.attempts else None
                )
            return step
        except BaseException as exc:
            span.fail(type(exc).__name__)
            raise
        finally:
            span.end()
            if spec.concurrency_key is not None:
                await self.key_gate.leave(d, spec)

    async def _attempt_traced(self, d: Delivery, setup: AttemptSetup) -> Step:
        """The attempt from its account slot to its outcome, under the attempt's span (`setup.span`)."""
        acquired = await self._acquire(d, setup)
        if isinstance(acquired, Step):
            return acquired
        began = await self._begin(d, setup, acquired)
        if isinstance(began, Step):
            return began
        setup, attempt = began
        attempt, outcome, refused, request = await self._run_attempt(d, setup, acquired, attempt)
        try:
            parked = request.approvals.parked if request.approvals is not None else None
            # A shutdown parks the request too: the job waits for its decision with no worker, as past the hold.
            if parked is not None and outcome is not None and refused is None and d.why in (None, "shutdown"):
                return Step.finished(await self._park(d, attempt, outcome, parked))
            return await self._after_run(d, setup, attempt, acquired.account, outcome, refused)
        finally:
            await self._settle(d)

    async def _acquire(self, d: Delivery, setup: AttemptSetup) -> SlotLease | Step:
        """The attempt's account slot (its start written in the slot's script when `setup.together`), or the step
        that ends the attempt without one: failed when no account ever can, a wait in place for a cooldown about to
        end, else deferred."""
        waiting = setup.span.child("claudeq.account_slot", job_id=d.job_id)
        try:
            acquired = await self.accounts.acquire(
                d.job_id,
                setup.spec,
                frozenset(),
                await self._rank(d),
                setup.holds,
                start=setup.start if setup.together else None,
                warm_wait_until=self._warm_wait_until(d),
            )
        except StartLost:
            self.writer.lost(d, "the attempt's start dropped")
            return Step.finished("lost")
        finally:
            waiting.end()
        if not isinstance(acquired, NoAccount):
            return acquired
        setup.span.set(outcome="no_account", detail=acquired.reason)
        if acquired.permanent:
            kind: ErrorKind = acquired.kind or ("account" if self.settings.accounts.names else "configuration")
            return Step.finished(await self.finish(d, "failed", JobError(kind=kind, message=acquired.reason)))
        until_ready = (acquired.ready_at - utcnow()).total_seconds()
        if acquired.cooldown and until_ready <= self.settings.retry_in_place_max_s:
            # A cooldown about to end: sit it out in place (no slot held) rather than a round trip via deferral.
            return Step("wait", reason="rate_limit", cooldown=Cooldown(acquired.ready_at))
        return Step.finished(
            await self._defer(d, acquired.ready_at, acquired.reason, acquired.accounts, acquired.tenant)
        )

    async def _begin(
        self, d: Delivery, setup: AttemptSetup, acquired: SlotLease
    ) -> tuple[AttemptSetup, Attempt] | Step:
        """The attempt started on the slot it holds: recorded (apart, when the slot's script did not write it), a
        parked request's decision delivered; the setup with the budget the slot grants. A step when the job was lost."""
        d.hold.slot = acquired
        setup.span.set(account=acquired.account.name)
        if acquired.budget_usd is not None:
            # What the tenant and the account have left, or the spec's own budget when smaller.
            setup = replace(setup, spec=setup.spec.model_copy(update={"max_budget_usd": acquired.budget_usd}))
        start = setup.start
        attempt = (
            acquired.started if acquired.started is not None else start.on(acquired.account.name, acquired.budget_usd)
        )
        d.attempts.append(attempt)
        if start.session_plan is not None:
            d.record = d.record.model_copy(update={"session_plan": start.session_plan})
        if acquired.started is None and not await self.writer.write(d, hold_events=True, **start.fields(attempt)):
            return Step.finished("lost")
        if d.unparked is not None and not await self._deliver_decision(d, d.unparked):
            return Step.finished("lost")
        return setup, attempt

    async def _run_attempt(
        self, d: Delivery, setup: AttemptSetup, acquired: SlotLease, attempt: Attempt
    ) -> tuple[Attempt, RunOutcome | None, JobError | None, RunRequest]:
        """The run in its workspace, and what it spent: the attempt (with its workspace's change), the outcome (None:
        no run), why the attempt is refused (None: it is not) and the request it ran."""
        spec, plan, span, number = setup.spec, setup.plan, setup.span, setup.start.number
        account = acquired.account
        request = RunRequest(
            job_id=d.job_id,
            attempt=number,
            spec=spec if plan.prompt is None else spec.model_copy(update={"prompt": plan.prompt}),
            account=account,
            resume=plan.resume,
            fork=plan.fork,
            resume_at=plan.resume_at,
            session_store=plan.session_store,
            urgent=d.urgent,
            traceparent=span.traceparent(),
            approvals=self._approval_gate(d, spec, number),
            account_reason=acquired.reason,
            prefix_key=acquired.prefix_key,
        )
        run_span = span.child("claudeq.run", job_id=d.job_id, account=account.name)
        try:
            tree, refused = await self.workspaces.prepare(d, spec)
            outcome = None
            if refused is None:
                outcome, refused = await self._run(d, request, account)
        finally:
            run_span.end()
        if refused is None and request.approvals is not None and request.approvals.failed is not None:
            # `on_approval_timeout = "fail"`: nobody decided in time (docs/jobs.md#tool-approval).
            refused = JobError(kind="job", message=request.approvals.failed)
        if tree is not None:
            attempt = await self.workspaces.collect(d, tree, attempt)
        if outcome is not None:
            await keep_outputs(self.settings, self.writer, d, outcome)
        if outcome is not None and span is not NO_SPAN:
            _trace_outcome(span, outcome)
        # Spend is real whoever owns the job now: counted even when the lease was lost. The job's terminal write
        # counts it in its own script when it can (`finish`); otherwise before the slot is given back (`_release`),
        # or at the latest as the attempt's step ends.
        cost = outcome.result.usage.cost_usd if outcome else 0.0
        d.hold.spent = Spent(acquired, cost, outcome.result.num_turns if outcome else None)
        self.metrics.tenant_cost(self.settings.tenants.label(spec.tenant), cost)
        if outcome is not None:
            self.metrics.tenant_tokens(self.settings.tenants.label(spec.tenant), outcome.result.usage)
        return attempt, outcome, refused, request

    async def _after_run(
        self,
        d: Delivery,
        setup: AttemptSetup,
        attempt: Attempt,
        account: AccountConfig,
        outcome: RunOutcome | None,
        refused: JobError | None,
    ) -> Step:
        """Classify a finished run and act on it (finish, requeue, retry or reroute)."""
        number, spec, span = attempt.number, setup.spec, setup.span
        if d.lost:
            log.warning("job %s: lease lost during attempt %d; writing nothing", d.job_id, number)
            return Step.finished("lost")
        if refused is not None:
            d.attempts[-1] = attempt.model_copy(
                update={"outcome": "failed", "detail": refused.message, "finished_at": utcnow()}
            )
            self.metrics.attempt(account.name, "failed")
            span.set(outcome="failed", detail=refused.message)
            return Step.finished(await self.finish(d, "failed", refused))
        assert outcome is not None
        if outcome.stopped_by == "cancel" and d.why == "shutdown":
            # The run was stopped for the shutdown, not by a user: requeue it. A run that finished before the stop
            # took effect keeps its own outcome (a success is never thrown away and run again).
            outcome = replace(outcome, stopped_by="shutdown")
        # An output the record cannot store would make every write of this result raise: the job fails once, kind
        # `output`, with what can be stored of it (worker/run/output_check.py).
        problem = unstorable(outcome.result)
        if problem is not None:
            log.warning("job %s: attempt %d's output cannot be stored: %s", d.job_id, number, problem)
            outcome = replace(outcome, result=storable(outcome.result))
        decision = decide(
            outcome,
            account,
            d.counted,
            setup.max_attempts,
            now=utcnow(),
            rate_limit_cooldown_s=self.settings.rate_limit_cooldown_s,
            output=OutputReview(
                spec.output_schema, None if problem is not None else await self._check_output(spec, outcome), problem
            ),
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
        d.trace.set(last_outcome=decision.outcome)
        span.set(outcome=decision.outcome, retry_reason=decision.retry_reason)
        if decision.outcome != "success":
            span.fail(decision.outcome)
        self.metrics.usage(account.name, outcome.result.usage)
        await _quietly(self.accounts.count_tokens(account.name, outcome.result.usage), "count tokens")
        d.result = outcome.result
        d.session_id = outcome.session_id or d.session_id
        self.writer.event(d, AttemptFinished(outcome=decision.outcome, detail=decision.detail).event())
        return await self._act(d, decision)

    async def _park(self, d: Delivery, attempt: Attempt, outcome: RunOutcome, request: PendingApproval) -> Finish:
        """The run stopped after the hold: the job waits in the deferred set until the request expires (a decision
        makes it due at once), with no CLI and no slot held (docs/jobs.md#tool-approval). The attempt is free."""
        detail = f"waiting for approval of {request.tool} ({request.request_id})"
        d.attempts[-1] = attempt.model_copy(
            update={
                "outcome": "requeued",
                "detail": detail,
                "session_id": outcome.session_id,
                "usage": outcome.result.usage,
                "finished_at": utcnow(),
            }
        )
        d.result = outcome.result
        d.session_id = outcome.session_id or d.session_id
        if not await self.approval_calls.open(d.job_id, request.model_copy(update={"parked": True})):
            return "lost"
        return await self._defer(d, request.expires_at, detail, [])

    async def _unpark(self, d: Delivery, pending: PendingApproval) -> PendingApproval | Step:
        """A parked job's new delivery: its request with the decision this run delivers (a person's, or the
        time-out's once it expired); or the step that ends the attempt (deferred again when woken before its time,
        failed when the time-out fails the job)."""
        spec = d.record.spec
        decision = pending.decision
        if decision is None and utcnow() < pending.expires_at - timedelta(seconds=1):
            again = pending.model_copy(update={"fence": d.lease.fence})
            if not await self.approval_calls.open(d.job_id, again):
                return Step.finished("lost")
            detail = f"waiting for approval of {pending.tool} ({pending.request_id})"
            return Step.finished(await self._defer(d, pending.expires_at, detail, []))
        if decision is None:
            decision = ApprovalDecision(
                approve=False, by="timeout", reason=f"no decision within {spec.approval_timeout_s:g} s"
            )
        settled = pending.model_copy(update={"parked": False, "fence": d.lease.fence, "decision": decision})
        if decision.by == "timeout" and spec.on_approval_timeout == "fail":
            if not await self._deliver_decision(d, settled):
                return Step.finished("lost")
            message = denial(pending.tool, decision, spec.approval_timeout_s)
            return Step.finished(await self.finish(d, "failed", JobError(kind="job", message=message)))
        return settled

    async def _deliver_decision(self, d: Delivery, settled: PendingApproval) -> bool:
        """Record a parked request's decision as delivered by this run (no longer parked; its event); False when the
        job is no longer this delivery's."""
        if not await self.approval_calls.open(d.job_id, settled):
            return False
        d.record = d.record.model_copy(update={"approval": settled})  # a retry in this delivery delivers it no more
        decision = settled.decision
        assert decision is not None
        decided = ApprovalDecided(
            request_id=settled.request_id,
            approve=decision.approve,
            by=decision.by,
            reason=decision.reason,
            decided_at=decision.at.isoformat(),
        )
        self.writer.event(d, decided.event())
        return True

    def _approval_gate(self, d: Delivery, spec: JobSpec, number: int) -> ApprovalGate | None:
        """The attempt's `can_use_tool` answer when some tool use of the job waits for approval (its own rules, else
        its tenant's default); None otherwise (docs/jobs.md#tool-approval)."""
        tenant = self.settings.tenants.get(spec.tenant)
        rules = rules_for(spec, tenant.approve_tools if tenant is not None else [])
        unparked = d.unparked
        decided = unparked.decision if unparked is not None else None
        approved = unparked if decided is not None and decided.approve else None
        if not rules:
            return None
        return ApprovalGate(
            preapproved=approved,
            job_id=d.job_id,
            fence=d.lease.fence,
            attempt=number,
            rules=rules,
            port=self.approval_calls,
            emit=self._emitter(d, number),
            cancel=d.cancel,
            hold_s=self.settings.approval_hold_s,
            timeout_s=spec.approval_timeout_s,
            on_timeout=spec.on_approval_timeout,
            draining=lambda: d.why == "shutdown",
        )

    def _warm_wait_until(self, d: Delivery) -> datetime | None:
        """Until when the job may wait for an account whose prompt cache holds its prefix: the setting's seconds
        from its submit, counted once (docs/architecture.md#cache-affinity); None: it never waits for one."""
        wait_s = self.settings.cache_affinity_wait_s
        if not self.settings.cache_affinity or wait_s <= 0:
            return None
        return d.record.created_at + timedelta(seconds=wait_s)

    async def _settle(self, d: Delivery) -> None:
        """Count the last attempt's cost if the job's terminal write did not (a failure is logged, never fatal)."""
        spent, d.hold.spent = d.hold.spent, None
        if spent is not None:
            await _quietly(self.accounts.admission.settle(spent.lease, spent.cost_usd, spent.turns), "settle")

    async def _release(self, d: Delivery) -> None:
        """Give back the delivery's slot, its attempt's spend counted first: the release drops the run's
        reservation and wakes waiters, whose admission must find that spend already counted (else runs started
        on what looked left take a tenant or an account past its cap)."""
        await self._settle(d)
        if d.hold.slot is not None:  # FINISH may have freed it already, in the terminal write's own script
            await self.dispatch.release(d)

    async def _run(
        self, d: Delivery, request: RunRequest, account: AccountConfig
    ) -> tuple[RunOutcome | None, JobError | None]:
        """Run one attempt; (outcome, None), or (None, error) when the run was refused before it started."""
        self.metrics.run_started(account.name)
        self.metrics.tenant_run(self.settings.tenants.label(request.spec.tenant))
        started = time.monotonic()
        outcome: RunOutcome | None = None
        try:
            outcome = await self.runner.run(request, self._emitter(d, request.attempt), d.cancel)
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

    async def _rank(self, d: Delivery) -> float:
        """The job's place in the waiting line (kept for the delivery): its virtual finish tag with tenants
        configured (fair share; priority orders within its tenant), else priority then its creation time."""
        if d.hold.rank is None:
            try:
                key = await self.accounts.fair_key(d.job_id, d.record.spec)
            except Exception:
                log.exception("job %s: no fair-share tag (its creation time orders it)", d.job_id)
                key = None
            d.hold.rank = rank(d.record, key)
        return d.hold.rank

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
            await _quiet(self.accounts.signals.observe, account.name, signal)
        if decision.cool_until is not None:
            await _quiet(self.accounts.signals.cool, account.name, decision.cool_until, decision.detail)
        if decision.disable_reason is not None:  # AccountSignals.disable logs it
            await _quiet(self.accounts.signals.disable, account.name, decision.disable_reason)

    async def _act(self, d: Delivery, decision: Decision) -> Step:
        if decision.action == "succeed":
            return Step.finished(await self.finish(d, "succeeded"))
        if decision.action in ("fail", "cancel"):
            assert decision.error is not None
            status: TerminalStatus = "failed" if decision.action == "fail" else "cancelled"
            return Step.finished(await self.finish(d, status, decision.error))
        if decision.action == "requeue":
            return Step.finished(await self._requeue(d, decision.detail))
        # retry / reroute: record the attempt, free the slot (a wait never holds it), go round again.
        if not await self.writer.write(d, attempts=d.attempts, result=self._result(d), session_id=d.session_id):
            return Step.finished("lost")
        await self._release(d)
        kind: StepKind = "retry" if decision.action == "retry" else "reroute"
        return Step(kind, reason=decision.retry_reason or decision.outcome)

    async def _between_attempts(self, d: Delivery) -> Step:
        """No run in flight and the delivery was stopped: act on why."""
        if d.why == "cancel":
            error = JobError(kind="cancelled", message="cancelled by request")
            return Step.finished(await self.finish(d, "cancelled", error))
        if d.why == "shutdown":
            return Step.finished(await self._requeue(d, "worker shutting down; job re-enqueued"))
        return Step.finished("lost")

    # ---- how a delivery ends -----------------------------------------------------------------------------------

    def _result(self, d: Delivery) -> JobResult:
        return d.result.model_copy(update={"usage": summed_usage(d.attempts)})

    async def finish(self, d: Delivery, status: TerminalStatus, error: JobError | None = None) -> Finish:
        """Write a terminal status (fenced); returns the status, or `lost` when the fence was stale."""
        # The run's slot, the job's index entries and its last attempt's spend go in the same script as the status
        # when they can (a run admitted as no tenant's): one round trip for the job's end.
        release = (
            None
            if d.hold.slot is None or d.lost
            else self.accounts.slot_release(
                d.hold.slot, d.record.spec.tenant, indexed=d.hold.indexed, spent=d.hold.spent
            )
        )
        span = d.trace.child("claudeq.terminal_write", job_id=d.job_id, status=status)
        event = ended(status, error)  # in the fenced write: no terminal event from a run that lost the job
        fields: JobFields = {
            "attempts": d.attempts,
            "result": self._result(d),
            "session_id": d.session_id,
            "error": error,
        }
        ok: bool | Literal["cancelled"] = False
        freed = Freed(False)
        try:
            if release is None:
                ok = await self.writer.write(d, status, event, **fields)
            else:
                ok, freed = await self.writer.finish(d, status, event, release, **fields)
        finally:
            span.set(written=bool(ok))
            span.end()
        if release is not None and ok:
            # Counted with the write (it landed: a retried write found it had, or its reply said so).
            d.hold.spent = None
        if freed.done:
            d.hold.slot = None
            await self.dispatch.send_admitted(list(freed.admitted))
        await self._release(d)
        if not ok:
            return "lost"
        return await self._ended(d, status, error, unindexed=freed.done)

    async def _ended(
        self, d: Delivery, status: TerminalStatus, error: JobError | None, *, unindexed: bool = False
    ) -> TerminalStatus:
        """What follows a terminal write that landed (its slot already given back): the job out of its tenant's
        active jobs (unless the write did it: `unindexed`), the conversation's next turn, the metrics."""
        if not unindexed:
            await _quietly(self.accounts.admission.job_done(d.record.spec.tenant, d.job_id), "job_done")
        try:
            waiting = await self.sessions.finished(d.record, status, d.session_id)
        except Exception:
            log.exception("job %s: conversation bookkeeping failed", d.job_id)
            waiting = []
        for job_id in waiting:
            await self.dispatch.promote_and_send(job_id, force=True)
        if self.settings.event_codec == "zlib" and not d.events.packed:  # a stream's: compacted by the script
            try:  # the record keeps its events as JSON if this fails: both forms read back
                await self.store.pack_events(d.job_id)
            except Exception:
                log.exception("job %s: packing its events failed", d.job_id)
        if self.store.archive is not None:
            sessions = [d.session_id] if d.session_id else []
            try:  # its bulk history moves off Redis later (claudeq/worker/background/loops.py `archiver`)
                await self.store.schedule_archive(d.job_id, self.settings.archive_after_s, sessions)
            except Exception:
                log.exception("job %s: scheduling its archive move failed", d.job_id)
        self.metrics.job_finished(d.record.spec.queue or self.settings.queue, status)
        log.info(
            "job %s: %s after %d attempt(s)%s", d.job_id, status, len(d.attempts), f" ({error.kind})" if error else ""
        )
        return status

    async def _defer(
        self, d: Delivery, ready_at: datetime, reason: str, accounts: list[str], tenant: str | None = None
    ) -> Finish:
        await self._release(d)
        ok = await self.writer.write(
            d,
            "deferred",
            Deferred(ready_at=ready_at.isoformat(), reason=reason).event(),
            ready_at=ready_at,
            attempts=d.attempts,
            result=self._result(d),
            session_id=d.session_id,
            wait_reason=reason,
        )
        if ok == CANCELLED:  # cancelled while it ran (before the deferral): it ends here instead of waiting
            return await self._ended(d, "cancelled", CANCEL_ERROR)
        if not ok:
            return "lost"
        # Its place among its tenant's waiting jobs (with a tenants file): priority, then creation time.
        among = tenant_rank(d.record.spec.priority, d.record.created_at.timestamp())
        if accounts:
            try:
                spec, place = d.record.spec, await self._rank(d)
                admitted = await self.accounts.add_waiter(accounts, d.job_id, place, spec.model, (spec.tenant, among))
            except Exception:
                log.exception("job %s: joining the waiting line failed (its ready time still promotes it)", d.job_id)
                admitted = []
            await self.dispatch.send_admitted(admitted)
        if tenant is not None:
            await _quietly(self.accounts.admission.add_tenant_waiter(tenant, d.job_id, among), "add_tenant_waiter")
        log.info("job %s: deferred until %s (%s)", d.job_id, ready_at.isoformat(), reason)
        return "deferred"

    async def _requeue(self, d: Delivery, reason: str) -> Finish:
        await self._release(d)
        requeued = Requeued(reason=reason).event()
        ok = await self.writer.write(
            d, "queued", requeued, attempts=d.attempts, result=self._result(d), session_id=d.session_id
        )
        if ok == CANCELLED:  # cancelled while it ran: it ends here instead of running again
            return await self._ended(d, "cancelled", CANCEL_ERROR)
        if not ok:
            return "lost"
        await self.dispatch.send_message(d.job_id, d.record.spec)
        log.info("job %s: requeued (%s)", d.job_id, reason)
        return "requeued"

    # ---- events and metric routing -----------------------------------------------------------------------------

    async def event(self, d: Delivery, event: Event) -> None:
        """Store an event of the delivery (fenced: a lost delivery stores nothing)."""
        self.writer.event(d, event)

    def _emitter(self, d: Delivery, attempt: int) -> EventSink:
        """The runner's event sink: numbers events with the attempt and routes the ones metrics count."""

        async def emit(event: Event) -> None:
            if event.attempt is None:
                event = event.model_copy(update={"attempt": attempt})
            data = data_of(event)
            if isinstance(data, ToolCalled):
                self.metrics.tool_call(data.tool)
            elif isinstance(data, MirrorError):
                self.metrics.mirror_error()
            elif isinstance(data, SessionStarted) and data.session_id:
                d.session_id = data.session_id
                await self.sessions.claim(d.record.spec.tenant, d.session_id)
            self.writer.event(d, event)

        return emit


def _trace_outcome(span: SpanLike, outcome: RunOutcome) -> None:
    """The run's GenAI attributes on the attempt's span, and each rate-limit signal as an event."""
    usage = outcome.result.usage
    span.set_raw(
        {
            "gen_ai.conversation.id": outcome.session_id,
            "gen_ai.response.model": primary_model(usage),
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_tokens,
        }
    )
    span.set(cost_usd=usage.cost_usd, num_turns=outcome.result.num_turns, stopped_by=outcome.stopped_by)
    for signal in outcome.rate_limits:
        span.event(
            "rate_limit",
            status=signal.status,
            window=signal.window,
            resets_at=signal.resets_at.isoformat() if signal.resets_at else None,
            utilization=signal.utilization,
        )


async def _quiet(fn: Callable[P, None], *args: P.args, **kwargs: P.kwargs) -> None:
    """Call a sync account-state method in a thread; a failure is logged, never fatal to the job."""
    try:
        await in_redis_thread(fn, *args, **kwargs)
    except Exception:
        log.exception("account update %s failed", getattr(fn, "__name__", fn))


async def _quietly(update: Coroutine[Any, Any, None], what: str) -> None:
    """Await an account-state update on the engine loop; a failure is logged, never fatal to the job."""
    try:
        await update
    except Exception:
        log.exception("account update %s failed", what)
