"""Deciding a job's pending approval request, from anywhere: the CLI, the clients, MCP (docs/jobs.md#tool-approval).

The request lives in the job hash (`approval`, written by the run that asked); the decision is written into it by
`APPROVAL_DECIDE`, once, and the run that waits on it reads it there. Who may decide: the operator (anyone with the
fleet's Redis: `tenant=None`) or the job's own tenant.
"""

from __future__ import annotations

from typing import Any

from claudeq.errors import ApprovalRefused, JobNotFound
from claudeq.jobs import JobStore
from claudeq.jobs import scripts as job_scripts
from claudeq.keys import text
from claudeq.models import ApprovalDecision, JobRecord, PendingApproval
from claudeq.script_calls import run_call

#: Why a decision was refused, by the script's answer.
REFUSALS: dict[str, str] = {
    "none": "job {job_id} has no approval request to decide",
    "decided": "request {request_id} of job {job_id} was already answered ({answer} by {by} at {at})",
    "other": "request {asked} is not job {job_id}'s latest approval request ({request_id})",
    "tenant": "job {job_id} is another tenant's: only its tenant or the operator may decide",
    "stale": "request {request_id} of job {job_id} can no longer be answered: the run that asked is gone",
}


def who(tenant: str | None) -> str:
    """How a decider is named in the decision: `operator`, or `tenant:<name>`."""
    return "operator" if tenant is None else f"tenant:{tenant}"


def decide(
    store: JobStore,
    job_id: str,
    *,
    approve: bool,
    reason: str | None = None,
    request_id: str | None = None,
    tenant: str | None = None,
) -> PendingApproval:
    """Answer the job's pending approval request (or `request_id`, which must be its latest) as `tenant`'s (None:
    the operator). The request with its decision; ApprovalRefused (with why) or JobNotFound otherwise."""
    script = store.redis.register_script(job_scripts.APPROVAL_DECIDE)
    decision = ApprovalDecision(approve=approve, by=who(tenant), reason=reason)
    args = job_scripts.ApprovalDecideArgs(
        job=store.keys.job(job_id),
        deferred=store.keys.deferred,
        request_id=request_id or "",
        tenant=tenant or "",
        decision_json=decision.model_dump_json(),
        job_id=job_id,
    )
    reply = script(keys=args.keys(), args=args.argv())
    code = text(reply[0])
    stored = PendingApproval.model_validate_json(text(reply[1])) if len(reply) > 1 else None
    if code == "ok" and stored is not None:
        return stored
    if code == "none" and not store.redis.exists(store.keys.job(job_id)):
        raise JobNotFound(job_id)
    first = stored.decision if stored is not None else None
    message = REFUSALS[code].format(
        job_id=job_id,
        request_id=stored.request_id if stored is not None else "-",
        asked=request_id,
        answer="approved" if first is not None and first.approve else "denied",
        by=first.by if first is not None else "-",
        at=first.at.isoformat() if first is not None else "-",
    )
    raise ApprovalRefused(job_id, code, message, decided_by=first.by if first is not None else None)


def waiting(store: JobStore, tenant: str | None = None) -> list[JobRecord]:
    """The jobs that wait for an approval now (of `tenant`'s only, when given): a running job (its run holds its
    CLI) or a deferred one (its run stopped after the hold), so this reads the records of those two sets."""
    job_ids = [text(i) for key in (store.keys.running, store.keys.deferred) for i in store.redis.zrange(key, 0, -1)]
    out: list[JobRecord] = []
    for record in run_call(store.records_call(job_ids)):
        mine = isinstance(record, JobRecord) and (tenant is None or record.spec.tenant == tenant)
        if mine and isinstance(record, JobRecord) and record.waiting_approval:
            out.append(record)
    return out


def public(pending_approval: PendingApproval) -> dict[str, Any]:
    """A request's public JSON form."""
    return pending_approval.model_dump(mode="json")
