"""The run package's port: what one attempt is asked to do and what it observed, as plain data (the engine builds the
`RunRequest`, the runner fills in the `RunOutcome`, the failure policy decides from it), where its events go
(`EventSink`) and the runner as the engine uses it (`RunnerLike`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from claudeq.models import Event, JobResult, JobSpec

from ...config.account_pool import AccountConfig
from ..passthrough.limit_headers import LimitHint

if TYPE_CHECKING:
    from claude_agent_sdk import SessionStore

    from .approval import ApprovalGate

#: Why the worker itself stopped a run (watchdogs and cancel), or None when the CLI ended on its own.
StopReason = Literal["first_byte", "idle", "deadline", "cancel", "shutdown"]


@dataclass
class RunRequest:
    """One attempt of one job on one account."""

    job_id: str
    attempt: int  # 1-based attempt number
    spec: JobSpec
    account: AccountConfig
    resume: str | None = None  # session id to resume
    fork: bool = False
    resume_at: str | None = None  # message uuid for resume_session_at
    session_store: SessionStore | None = None  # where the run's transcript is mirrored (and resumed from)
    #: Set when the job is no longer this worker's (lease lost or about to expire): SIGKILL the run's processes at
    #: once instead of the graceful stop, so it is gone before another worker can take the job over.
    urgent: asyncio.Event | None = None
    #: The attempt span's context when the job is traced: the run's CLI exports its own spans under it.
    traceparent: str | None = None
    #: The `can_use_tool` answer for tools that wait for a person's approval (docs/jobs.md#tool-approval).
    approvals: ApprovalGate | None = None
    #: Why the account was chosen (`warm cache` / `least used`), and the job's prefix key: the pass-through files
    #: the prompt prefixes the run caches under it (docs/architecture.md#cache-affinity).
    account_reason: str | None = None
    prefix_key: str | None = None


@dataclass(frozen=True)
class RateLimitSignal:
    """One `RateLimitEvent` as seen by the runner (RateLimitInfo, typed)."""

    status: str  # allowed | allowed_warning | rejected
    resets_at: datetime | None = None
    window: str | None = None  # five_hour | seven_day | seven_day_opus | overage | ...
    utilization: float | None = None


@dataclass
class RunOutcome:
    """Everything the policy needs to know about one attempt, and what goes on the record."""

    result: JobResult = field(default_factory=JobResult)  # partial for a failed or killed run
    session_id: str | None = None
    got_result: bool = False  # a ResultMessage arrived
    is_error: bool = False  # ResultMessage.is_error (decide success from this, not from subtype)
    subtype: str | None = None  # success | error_max_turns | error_max_budget_usd | error_during_execution | ...
    terminal_reason: str | None = None  # e.g. api_error
    api_error_status: int | None = None  # e.g. 429, 529, 401
    assistant_error: str | None = None  # AssistantMessage.error: rate_limit | authentication_failed | server_error
    errors: list[str] = field(default_factory=list)  # ResultMessage.errors
    rate_limits: list[RateLimitSignal] = field(default_factory=list)  # in arrival order
    api_retries: int = 0  # system/api_retry messages (the CLI's own retries)
    stopped_by: StopReason | None = None
    exception: str | None = None  # the CLI crashed / could not start: type and message, never a secret
    exit_code: int | None = None
    start_errno: int | None = None  # the CLI could not start, for good: E2BIG, ENOENT, EACCES, ENOEXEC
    stderr_tail: str | None = None  # last lines of the CLI's stderr, secrets redacted
    tool_calls: list[str] = field(default_factory=list)  # tool names, in call order
    mirror_errors: int = 0  # MirrorErrorMessage count (session store)
    first_byte_at: float | None = None  # monotonic time of the first streamed byte
    duration_s: float = 0.0
    limit_hint: LimitHint | None = None  # the pass-through saw a 429 in this run (its account is already cooled)
    passthrough_failed: str | None = None  # the worker's pass-through stopped while this run used it
    #: What the run wrote under `$CLAUDEQ_OUTPUTS`: (name, bytes) kept, names left out (worker/run/outputs.py).
    outputs: list[tuple[str, bytes]] = field(default_factory=list)
    outputs_dropped: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> RateLimitSignal | None:
        """The last `rejected` rate-limit signal, if any."""
        return next((r for r in reversed(self.rate_limits) if r.status == "rejected"), None)


#: Where a run's events go (the engine stores them on the job's stream).
EventSink = Callable[[Event], Awaitable[None]]


class RunnerLike(Protocol):
    """claudeq.worker.run.runner.Runner as the engine uses it."""

    def check(self, spec: JobSpec) -> None:
        """PolicyViolation when this worker's permission policy forbids the spec."""

    async def run(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        """Run one attempt."""
