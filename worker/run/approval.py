"""The run's `can_use_tool` answer for tools that wait for a person's approval (docs/jobs.md#tool-approval).

The CLI asks the callback before each use of a tool left out of `allowed_tools`
(docs/cli-behaviour.md#tool-approval-can_use_tool); a call no rule matches is allowed at once. A matching call is
recorded as the job's approval request (the job then shows `waiting_approval`) and the callback waits for the
decision, holding the CLI, for up to `CLAUDEQ_APPROVAL_HOLD_S`. A decision in that time is the callback's answer.
Past the hold, with time left before the job's `approval_timeout_s`, the run *parks*: the callback denies the call
with the interrupt flag, the run ends, and the handler defers the job until the request expires (no CLI, no slot
held); the decision wakes it, and its next run resumes the session with the decision as the next prompt
(`resume_prompt`), since a resumed session never asks again (docs/cli-behaviour.md#tool-approval-can_use_tool).
An approved call made again with the same input is then allowed at once (`preapproved`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from claudeq.events import ApprovalDecided, ApprovalRequested
from claudeq.models import ApprovalDecision, Event, JobSpec, PendingApproval, utcnow

from ...config.approval_rules import ApprovalRule, needs_approval, rule_of, tool_named

if TYPE_CHECKING:  # the SDK is the worker's; the handler imports this module in the SDK-free testing kit too
    from claude_agent_sdk.types import PermissionResult, ToolPermissionContext

#: How often a waiting callback reads the decision.
POLL_S = 0.25


class ApprovalPort(Protocol):
    """Where requests and decisions live (claudeq.worker.store.approvals.ApprovalCalls)."""

    async def open(self, job_id: str, request: PendingApproval) -> bool: ...

    async def read(self, job_id: str) -> PendingApproval | None: ...

    async def time_out(self, job_id: str, request_id: str, reason: str) -> PendingApproval | None: ...


def rules_for(spec: JobSpec, tenant_default: list[str | ApprovalRule]) -> list[ApprovalRule]:
    """The job's approval rules: its own `approve_tools`, else its tenant's default."""
    return [rule_of(r) for r in (spec.approve_tools or tenant_default)]


#: What the model is told when its run parks (the tool result of the call that waits).
PARKED = (
    "This call waits for a person's approval (request {request_id}); the run pauses here and goes on with the decision."
)


def resume_prompt(request: PendingApproval, timeout_s: float) -> str:
    """The prompt of the run that resumes a parked job's session: the decision on its pending call. The approval's
    wording is what the simulator answers with that very call (docs/simulator.md)."""
    decision = request.decision
    assert decision is not None
    if decision.approve:
        shown = json.dumps(request.input, ensure_ascii=False, separators=(", ", ": "))
        return (
            f"A person approved your use of the {request.tool} tool (request {request.request_id}). "
            f"Call {request.tool} again now with exactly this input: {shown}"
        )
    return f"{denial(request.tool, decision, timeout_s)} Go on without it (request {request.request_id})."


def denial(tool: str, decision: ApprovalDecision, timeout_s: float) -> str:
    """What the model is told when a call was not approved."""
    if decision.by == "timeout":
        return f"Nobody approved this use of {tool} within {timeout_s:g} s, so it did not run."
    because = f": {decision.reason}" if decision.reason else "."
    return f"A person denied this use of {tool} (it did not run){because}"


@dataclass
class ApprovalGate:
    """One attempt's `can_use_tool` callback: asks for approval of the calls its rules match, and waits."""

    job_id: str
    fence: int
    attempt: int
    rules: list[ApprovalRule]
    port: ApprovalPort
    emit: Callable[[Event], Awaitable[None]]
    cancel: asyncio.Event
    hold_s: float
    timeout_s: float
    on_timeout: Literal["deny", "fail"]
    #: A call a person approved while the job was parked: allowed at once when made again with the same input.
    preapproved: PendingApproval | None = None
    #: Set when a time-out fails the job (`on_approval_timeout = "fail"`): the error's message.
    failed: str | None = None
    #: The request the run stopped for after the hold: the handler defers the job until the decision.
    parked: PendingApproval | None = None
    #: Whether the run is being stopped for the worker's shutdown (the request then parks rather than being lost).
    draining: Callable[[], bool] = lambda: False

    def asks(self, tool: str) -> bool:
        """Whether calls of `tool` must go through this gate (the CLI asks only for tools not pre-allowed)."""
        return tool_named(self.rules, tool)

    async def __call__(self, tool: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> PermissionResult:
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        if needs_approval(self.rules, tool, tool_input) is None:
            return PermissionResultAllow()
        approved = self.preapproved
        if approved is not None and approved.tool == tool and approved.input == tool_input:
            self.preapproved = None  # once
            return PermissionResultAllow()
        now = utcnow()
        request = PendingApproval(
            request_id=f"apr-{uuid.uuid4().hex[:12]}",
            tool=tool,
            input=tool_input,
            tool_use_id=context.tool_use_id,
            requested_at=now,
            expires_at=now + timedelta(seconds=self.timeout_s),
            fence=self.fence,
        )
        if not await self.port.open(self.job_id, request):
            return PermissionResultDeny(message="The job is no longer this run's.", interrupt=True)
        await self.emit(
            ApprovalRequested(
                request_id=request.request_id,
                tool=tool,
                input=json.loads(json.dumps(tool_input)),
                tool_use_id=context.tool_use_id,
                expires_at=request.expires_at.isoformat(),
            ).event(self.attempt)
        )
        decided = await self._wait(request)
        if decided is not None and decided.decision is None:  # past the hold, time left: park
            self.parked = request
            return PermissionResultDeny(message=PARKED.format(request_id=request.request_id), interrupt=True)
        if decided is None:  # cancelled, or the job is gone: the run is being stopped
            return PermissionResultDeny(
                message="The job was stopped while this call waited for approval.", interrupt=True
            )
        decision = decided.decision
        assert decision is not None
        await self.emit(
            ApprovalDecided(
                request_id=request.request_id,
                approve=decision.approve,
                by=decision.by,
                reason=decision.reason,
                decided_at=decision.at.isoformat(),
            ).event(self.attempt)
        )
        if decision.approve:
            return PermissionResultAllow()
        message = denial(tool, decision, self.timeout_s)
        if decision.by == "timeout" and self.on_timeout == "fail":
            self.failed = message
            return PermissionResultDeny(message=message, interrupt=True)
        return PermissionResultDeny(message=message)

    async def _wait(self, request: PendingApproval) -> PendingApproval | None:
        """The request with its decision: a person's, or the time-out's when it expires within the hold; the
        request without one when the hold ends first (park); None when the run stops."""
        until = time.monotonic() + min(self.hold_s, self.timeout_s)
        while time.monotonic() < until:
            if self.cancel.is_set():
                return await self._as_it_stands(request) if self.draining() else None
            current = await self.port.read(self.job_id)
            if current is None or current.request_id != request.request_id:
                return None
            if current.decision is not None:
                return current
            try:
                await asyncio.wait_for(self.cancel.wait(), timeout=min(POLL_S, max(0.0, until - time.monotonic())))
            except TimeoutError:
                pass
        if self.hold_s < self.timeout_s:
            return await self._as_it_stands(request)  # a decision that came at the very end still counts
        return await self.port.time_out(self.job_id, request.request_id, f"no decision within {self.timeout_s:g} s")

    async def _as_it_stands(self, request: PendingApproval) -> PendingApproval | None:
        """The request as it stands now (its decision if one came, else none: park); None when it is gone."""
        current = await self.port.read(self.job_id)
        if current is None or current.request_id != request.request_id:
            return None
        return current
