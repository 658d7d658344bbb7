"""The run's `can_use_tool` answer (worker/run/approval.py), against an in-memory store of requests."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny
from claude_agent_sdk.types import ToolPermissionContext

from claudeq.config.approval_rules import rule_of
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import PolicyViolation
from claudeq.models import ApprovalDecision, Event, JobSpec, PendingApproval
from claudeq.worker.run.approval import ApprovalGate, resume_prompt
from claudeq.worker.run.options import CliLaunch, build_options


class Requests:
    """The job's latest request, as the job hash holds it."""

    def __init__(self, answer: ApprovalDecision | None = None, after_reads: int = 0) -> None:
        self.current: PendingApproval | None = None
        self.answer, self.after_reads, self.reads = answer, after_reads, 0

    async def open(self, job_id: str, request: PendingApproval) -> bool:
        self.current = request
        return True

    async def read(self, job_id: str) -> PendingApproval | None:
        self.reads += 1
        if self.current is not None and self.answer is not None and self.reads > self.after_reads:
            self.current = self.current.model_copy(update={"decision": self.answer})
        return self.current

    async def time_out(self, job_id: str, request_id: str, reason: str) -> PendingApproval | None:
        assert self.current is not None
        self.current = self.current.model_copy(
            update={"decision": ApprovalDecision(approve=False, by="timeout", reason=reason)}
        )
        return self.current


def gate(
    port: Requests,
    *,
    hold_s: float = 5,
    timeout_s: float = 60,
    on_timeout: Literal["deny", "fail"] = "deny",
) -> tuple[ApprovalGate, list[Event]]:
    emitted: list[Event] = []

    async def emit(event: Event) -> None:
        emitted.append(event)

    made = ApprovalGate(
        job_id="j1",
        fence=3,
        attempt=1,
        rules=[rule_of("Bash")],
        port=port,
        emit=emit,
        cancel=asyncio.Event(),
        hold_s=hold_s,
        timeout_s=timeout_s,
        on_timeout=on_timeout,
    )
    return made, emitted


CONTEXT = ToolPermissionContext(tool_use_id="toolu_1")


def ask(made: ApprovalGate, tool: str = "Bash", tool_input: dict[str, Any] | None = None) -> Any:
    return asyncio.run(made(tool, tool_input or {"command": "git push"}, CONTEXT))


def test_a_call_no_rule_matches_is_allowed_without_a_request() -> None:
    port = Requests()
    made, emitted = gate(port)
    assert isinstance(ask(made, "Read", {"file_path": "/x"}), PermissionResultAllow)
    assert port.current is None and emitted == []


def test_an_approval_within_the_hold_is_the_callbacks_answer() -> None:
    port = Requests(ApprovalDecision(approve=True, by="operator"), after_reads=2)
    made, emitted = gate(port)
    assert isinstance(ask(made), PermissionResultAllow)
    assert [e.type for e in emitted] == ["approval_requested", "approval_decided"]
    assert emitted[0].data["tool_use_id"] == "toolu_1" and port.current is not None and port.current.fence == 3


def test_a_denial_tells_the_model_why_and_the_run_goes_on() -> None:
    made, _ = gate(Requests(ApprovalDecision(approve=False, by="tenant:t", reason="not today")))
    answer = ask(made)
    assert isinstance(answer, PermissionResultDeny) and not answer.interrupt
    assert "denied" in answer.message and "not today" in answer.message


def test_past_the_hold_with_time_left_the_run_parks() -> None:
    made, emitted = gate(Requests(), hold_s=0.3, timeout_s=60)
    answer = ask(made)
    assert isinstance(answer, PermissionResultDeny) and answer.interrupt
    assert made.parked is not None and made.parked.decision is None
    assert [e.type for e in emitted] == ["approval_requested"]


def test_a_timeout_within_the_hold_denies_or_fails() -> None:
    made, emitted = gate(Requests(), hold_s=5, timeout_s=0.3)
    answer = ask(made)
    assert isinstance(answer, PermissionResultDeny) and not answer.interrupt and made.failed is None
    assert emitted[-1].data["by"] == "timeout"
    failing, _ = gate(Requests(), hold_s=5, timeout_s=0.3, on_timeout="fail")
    answer = ask(failing)
    assert isinstance(answer, PermissionResultDeny) and answer.interrupt and failing.failed is not None


def test_a_call_approved_while_parked_runs_once_with_exactly_that_input() -> None:
    port = Requests()
    made, _ = gate(port, hold_s=0.2)
    approved = PendingApproval(
        request_id="apr-1",
        tool="Bash",
        input={"command": "git push", "tags": []},
        requested_at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
        expires_at="2026-01-02T00:00:00Z",  # type: ignore[arg-type]
        fence=2,
        decision=ApprovalDecision(approve=True, by="operator"),
    )
    made.preapproved = approved
    assert isinstance(ask(made, tool_input={"command": "git push", "tags": []}), PermissionResultAllow)
    assert port.current is None  # allowed without a new request
    # Once only: the same call again asks again (and here parks).
    assert isinstance(ask(made, tool_input={"command": "git push", "tags": []}), PermissionResultDeny)
    prompt = resume_prompt(approved, 60)
    assert prompt.endswith('Call Bash again now with exactly this input: {"command": "git push", "tags": []}')


def test_the_tools_it_asks_for_are_not_pre_allowed_and_a_sandbox_does_not_allow_bash_by_itself() -> None:
    settings = Settings(_env_file=None, policy=WorkerPolicy(allowed_tools=["Bash", "Read"], shell_sandbox=True))  # type: ignore[call-arg]
    spec = JobSpec(prompt="p", tools=["Bash", "Read"], approve_tools=["Bash"])
    made, _ = gate(Requests())
    options = build_options(spec, settings, launch=CliLaunch({}), approvals=made)
    assert options.allowed_tools == ["Read"] and options.can_use_tool is made
    assert options.sandbox is not None and options.sandbox["autoAllowBashIfSandboxed"] is False
    plain = build_options(spec.model_copy(update={"approve_tools": []}), settings, launch=CliLaunch({}))
    assert plain.allowed_tools == ["Bash", "Read"] and plain.can_use_tool is None


@pytest.mark.parametrize("mode", ["bypassPermissions", "acceptEdits"])
def test_a_tenants_rules_cannot_be_bypassed_by_the_permission_mode(mode: str) -> None:
    settings = Settings(_env_file=None, policy=WorkerPolicy(allowed_tools=["Bash"]))  # type: ignore[call-arg]
    spec = JobSpec(prompt="p", tools=["Bash"], permission_mode=mode)  # type: ignore[arg-type]
    made, _ = gate(Requests())
    with pytest.raises(PolicyViolation):
        build_options(spec, settings, launch=CliLaunch({}), approvals=made)
