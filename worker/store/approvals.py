"""A run's side of a job's approval requests in Redis: record one (fenced), read its decision, and answer it when
nobody did in time (docs/jobs.md#tool-approval). The calls go on the job store's clients (`AsyncCalls.send`)."""

from __future__ import annotations

from typing import Any

from claudeq.jobs import JobStore
from claudeq.jobs import scripts as job_scripts
from claudeq.keys import text
from claudeq.models import ApprovalDecision, PendingApproval
from claudeq.script_calls import AsyncCalls, PipeCall

from . import worker_job_scripts as scripts


class ApprovalCalls:
    """Approval requests of the jobs a worker runs, through `store`'s clients."""

    def __init__(self, store: JobStore) -> None:
        assert isinstance(store, AsyncCalls)
        self.store = store
        self._open = store.redis.register_script(scripts.APPROVAL_OPEN)
        self._decide = store.redis.register_script(job_scripts.APPROVAL_DECIDE)

    async def open(self, job_id: str, request: PendingApproval) -> bool:
        """Record `request` as the job's latest; False when the job is no longer its run's (`request.fence`)."""
        data = request.model_dump_json(exclude_none=True)
        args = scripts.ApprovalOpenArgs(job=self.store.keys.job(job_id), fence=str(request.fence), approval_json=data)
        call = args.call(self._open, lambda r: r == 1)
        return bool(await self.store.send(call))

    async def read(self, job_id: str) -> PendingApproval | None:
        """The job's latest request (with its decision, once there is one)."""
        key = self.store.keys.job(job_id)

        def parse(replies: list[Any]) -> PendingApproval | None:
            raw = replies[0]
            return None if raw is None else PendingApproval.model_validate_json(text(raw))

        call = PipeCall(self.store.redis, lambda pipe: pipe.hget(key, "approval"), parse)
        return await self.store.send(call)

    async def time_out(self, job_id: str, request_id: str, reason: str) -> PendingApproval | None:
        """Answer the request `deny` as `timeout`, unless a person answered it first: the request as it stands
        then (None: it is gone)."""
        decision = ApprovalDecision(approve=False, by="timeout", reason=reason)

        def parse(reply: Any) -> PendingApproval | None:
            return PendingApproval.model_validate_json(text(reply[1])) if len(reply) > 1 else None

        args = job_scripts.ApprovalDecideArgs(
            job=self.store.keys.job(job_id),
            deferred=self.store.keys.deferred,
            request_id=request_id,
            tenant="",
            decision_json=decision.model_dump_json(),
            job_id=job_id,
        )
        call = args.call(self._decide, parse)
        return await self.store.send(call)
