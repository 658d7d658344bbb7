"""The job contract: what a job is, what is stored about it and about accounts, in one public JSON form."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from claudeq.artifacts import Artifacts
from claudeq.config.approval_rules import MAX_RULES, ApprovalRule
from claudeq.config.settings import MAX_ATTEMPTS_CAP, TOOL_PROFILES, BasePrompt, PermissionMode
from claudeq.config.tenants import DEFAULT_TENANT, TENANT_NAME
from claudeq.workspaces import ChangeStat, WorkspaceChange, WorkspaceSpec

JobStatus = Literal["waiting", "queued", "deferred", "running", "succeeded", "failed", "cancelled"]
#: The statuses a job ends in.
TerminalStatus = Literal["succeeded", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE: frozenset[str] = frozenset({"waiting", "queued", "deferred", "running"})

Outcome = Literal[
    "success",
    "rate_limited",
    "transient_error",
    "timeout",
    "auth_failed",
    "cancelled",
    "failed",
    "worker_lost",
    "requeued",
]
#: Outcomes that do not count against a job's max attempts.
FREE_OUTCOMES: frozenset[str] = frozenset({"rate_limited", "worker_lost", "requeued"})

ErrorKind = Literal[
    "input",  # the spec or the policy refused it
    "configuration",  # the fleet cannot run it (no account, CLI missing)
    "job",  # max turns, budget, schema: the run itself ended badly
    "transient",  # attempts exhausted on transient errors
    "timeout",  # attempts exhausted on watchdog timeouts
    "account",  # no usable account (all disabled)
    "cancelled",
    "internal",
    "poisoned",  # it lost its worker too many times (it froze or killed each one): failed rather than retried
    "budget_exceeded",  # its tenant (on_budget = "fail") or every account it may use is over a spend cap
    "output",  # the run's output cannot be stored (e.g. a structured output nested too deeply to serialise)
    "dependency",  # a job it depends on failed or was cancelled (on_dependency_failure = "fail")
    "workspace",  # its git workspace could not be made (repo, ref or branch gone or refused)
]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


#: A UTC timestamp that serialises as ISO 8601 with a `Z`.
Timestamp = Annotated[datetime, PlainSerializer(_iso, return_type=str, when_used="json")]

JsonScalar = str | int | float | bool | None

#: The metadata key under which a job submitted from inside another job's run records that job's id.
PARENT_JOB_KEY = "parent_job_id"


#: What a job id looks like where a spec names one (`depends_on`): what `new_job_id` makes, and room for others'.
JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
#: A W3C traceparent: version, trace id, parent span id, flags (https://www.w3.org/TR/trace-context/).
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id in a traceparent, or None."""
    if not traceparent:
        return None
    match = TRACEPARENT.match(traceparent)
    return match.group(1) if match else None


#: The permission modes under which the CLI asks before each tool use not pre-allowed (acceptEdits lets file edits
#: through unasked, bypassPermissions everything: docs/cli-behaviour.md#tool-approval-can_use_tool).
APPROVAL_MODES: frozenset[str | None] = frozenset({None, "default"})
#: How long an approval waits by default (JobSpec.approval_timeout_s): a day.
DEFAULT_APPROVAL_TIMEOUT_S = 86400.0
#: The most jobs one job may depend on (JobSpec.depends_on).
MAX_DEPENDENCIES = 100

#: A Celery task name or queue a callback names (Celery's own names: dotted, no spaces).
CELERY_NAME = r"^[A-Za-z_][\w.:-]{0,199}$"


#: Characters a string that becomes a command-line argument, a path, a Redis key, a header or a queue name must not
#: hold: the C0 controls (NUL cuts an argument short, a newline splits a header) and DEL.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def control_problem(value: str) -> str | None:
    """Why `value` cannot become an argument, a path, a key or a header (a control character in it), or None."""
    found = CONTROL_CHARS.search(value)
    if found is None:
        return None
    return f"holds a control character ({found.group()!r} at {found.start()}): it would go on a command line or a key"


def surrogate_problem(value: Any) -> str | None:
    """Why `value` (a string, or any JSON value holding strings) cannot be stored: a lone surrogate has no UTF-8.
    Walked without recursion: a value nested however deep is checked, never a RecursionError."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"holds a lone surrogate ({item[exc.start]!r} at {exc.start}), which is not text (no UTF-8 form)"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, BaseModel):
            stack.extend(item.__dict__.values())
    return None


#: How deep an output schema may nest (objects and arrays): deeper ones are refused at submit, before a validator
#: recurses through them.
MAX_SCHEMA_DEPTH = 32


def nesting_depth(value: Any) -> int:
    """How deep `value` nests dicts and lists (a scalar: 0), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


#: Event types a webhook cannot ask for one by one: the end is always sent (and `unreadable` is the reader's own).
UNWATCHABLE_EVENTS = frozenset({"submitted", "succeeded", "failed", "cancelled", "unreadable"})


class WebhookSpec(BaseModel):
    """Where a job's end is POSTed, signed the Standard Webhooks way (docs/notifications.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=2000, description="http(s) URL on a host the fleet allows.")
    body: Literal["record", "result"] = Field(
        default="record", description="The record's public JSON, or only its `result` (and status, id, error)."
    )
    events: list[str] = Field(
        default_factory=list,
        max_length=30,
        description="Also POST these event types as they happen (tool_call, rate_limit, retry, …); the end is sent "
        "in any case.",
    )

    @field_validator("url")
    @classmethod
    def _url_text(cls, value: str) -> str:
        problem = control_problem(value) or surrogate_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("events")
    @classmethod
    def _known_events(cls, value: list[str]) -> list[str]:
        known = set(get_args(EventType)) - UNWATCHABLE_EVENTS
        unknown = [v for v in value if v not in known]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an event type a webhook can follow ({', '.join(sorted(known))})")
        if len(set(value)) != len(value):
            raise ValueError("names an event type twice")
        return value


class CallbackSpec(BaseModel):
    """A task of the producer's own Celery app, sent once with the job's public record when the job ends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(pattern=CELERY_NAME, description="The task's registered name, e.g. myapp.tasks.store.")
    queue: str = Field(default="celery", pattern=CELERY_NAME, description="The queue its worker consumes.")


class JobSpec(BaseModel):
    """What a producer asks for. Unknown fields are refused, so a typo never silently does nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(min_length=1, description="The user prompt.")
    system_prompt: str | None = Field(default=None, description="Replaces the default system prompt.")
    append_system_prompt: str | None = Field(
        default=None, description="Appended to the base prompt (or to `system_prompt` when given)."
    )
    base_prompt: BasePrompt | None = Field(
        default=None,
        description="The system prompt to start from when `system_prompt` is not given: `claude_code` (Claude "
        "Code's preset) or `minimal`; default: the fleet's CLAUDEQ_BASE_PROMPT.",
    )
    model: str | None = Field(default=None, description="Model alias or id (default: the CLI's default).")
    fallback_model: str | None = None
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    max_budget_usd: float | None = Field(default=None, gt=0)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    thinking: Literal["adaptive", "enabled", "disabled"] | None = None
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    tools: str | list[str] = Field(default="none", description="A tool profile name or a list of built-in tools.")
    mcp_tools: list[str] = Field(default_factory=list, description="Worker-registered MCP tools, by name.")
    permission_mode: PermissionMode | None = None
    cwd: str | None = Field(default=None, description="Working directory; must be under a workspace root.")
    add_dirs: list[str] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = Field(default=None, description="JSON schema of a structured result.")
    conversation: str | None = Field(default=None, min_length=1, max_length=200)
    resume: str | None = Field(default=None, description="Explicit session id to resume.")
    fork: bool = False
    on_missing_session: Literal["fail", "restart"] = "fail"
    account: str | None = Field(default=None, description="Pin the job to this account.")
    queue: str | None = None
    priority: int = Field(default=0, ge=0, le=9, description="0 (first) .. 9 (last), as Celery's Redis transport.")
    tenant: str = Field(
        default=DEFAULT_TENANT,
        pattern=TENANT_NAME.pattern,
        description="Who the job is for: its tenant's caps, weight, budgets and allow-lists apply.",
    )
    deadline_s: float | None = Field(default=None, gt=0)
    idle_timeout_s: float | None = Field(default=None, gt=0)
    first_byte_timeout_s: float | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS_CAP)
    metadata: dict[str, JsonScalar] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    depends_on: list[str] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="Jobs (of the same tenant) that must succeed first; the job is `waiting` until they end.",
    )
    on_dependency_failure: Literal["fail", "run"] = Field(
        default="fail", description="A dependency failed or was cancelled: fail this job (kind dependency), or run it."
    )
    webhook: WebhookSpec | None = Field(default=None, description="POST the job's end here, signed.")
    approve_tools: list[str | ApprovalRule] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description="Tool uses that wait for a person's approval: tool names or globs, or {tool, match} rules "
        "(docs/jobs.md#tool-approval); none: the tenant's default.",
    )
    approval_timeout_s: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_S, gt=0, le=30 * 86400, description="How long an approval may wait."
    )
    on_approval_timeout: Literal["deny", "fail"] = Field(
        default="deny", description="No decision in time: deny the tool use (the run goes on), or fail the job."
    )
    link: CallbackSpec | None = Field(default=None, description="A Celery task sent the record when it succeeds.")
    link_error: CallbackSpec | None = Field(default=None, description="A Celery task sent the record otherwise.")
    workspace: WorkspaceSpec | None = Field(
        default=None, description="Work in a git worktree of its own; the change comes back as a diff and a branch."
    )
    concurrency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Jobs sharing this key (of one tenant) run at most `concurrency_limit` at once fleet-wide.",
    )
    concurrency_limit: int = Field(default=1, ge=1, le=1000, description="How many jobs of its key may run at once.")

    @field_validator("*")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        problem = surrogate_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator(
        "model",
        "fallback_model",
        "resume",
        "account",
        "idempotency_key",
        "conversation",
        "queue",
        "cwd",
        "add_dirs",
        "mcp_tools",
        "tools",
    )
    @classmethod
    def _no_control_characters(cls, value: str | list[str] | None) -> str | list[str] | None:
        for item in [value] if isinstance(value, str) else (value or []):
            problem = control_problem(item)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("depends_on")
    @classmethod
    def _dependencies_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names a job twice")
        if any(not JOB_ID.match(v) for v in value):
            raise ValueError("each entry must be a job id")
        return value

    @field_validator("tools")
    @classmethod
    def _known_profile(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str) and value not in TOOL_PROFILES:
            raise ValueError(f"unknown tool profile {value!r}; one of {', '.join(TOOL_PROFILES)} or a list of tools")
        return value

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        if nesting_depth(value) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"nests more than {MAX_SCHEMA_DEPTH} levels deep")
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a valid JSON schema: {exc.message}") from None
        except RecursionError:
            raise ValueError("nests too deeply to be checked") from None
        if value.get("type", "object") != "object":
            raise ValueError("the top level of an output schema must be an object")
        return value

    @field_validator("cwd", "add_dirs")
    @classmethod
    def _absolute(cls, value: str | list[str] | None) -> str | list[str] | None:
        paths = [value] if isinstance(value, str) else (value or [])
        for path in paths:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} must be an absolute path")
        return value

    @field_validator("approve_tools")
    @classmethod
    def _approval_rules(cls, value: list[str | ApprovalRule], info: ValidationInfo) -> list[str | ApprovalRule]:
        mode = info.data.get("permission_mode")
        if value and mode not in APPROVAL_MODES:
            raise ValueError(f"needs permission_mode default: the CLI asks about no tool use under {mode}")
        for rule in value:
            if isinstance(rule, str) and not 0 < len(rule) <= 200:
                raise ValueError("a tool name or glob is 1 to 200 characters")
        return value

    @model_validator(mode="after")
    def _session_options(self) -> JobSpec:
        if self.fork and not (self.conversation or self.resume):
            raise ValueError("fork needs a conversation or a resume session id")
        if self.resume and self.conversation:
            raise ValueError("give either conversation or resume, not both")
        if self.base_prompt is not None and self.system_prompt is not None:
            raise ValueError("give either system_prompt (a whole prompt of your own) or base_prompt, not both")
        return self


class ApprovalDecision(BaseModel):
    """A person's (or the time-out's) answer to an approval request."""

    approve: bool
    by: str  # `operator`, `tenant:<name>`, or `timeout`
    at: Timestamp = Field(default_factory=lambda: utcnow())
    reason: str | None = None


class PendingApproval(BaseModel):
    """A run's request to use a tool that waits for approval (the job hash's `approval` field): the latest one,
    with its decision once there is one."""

    request_id: str
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    tool_use_id: str | None = None
    requested_at: Timestamp
    expires_at: Timestamp
    fence: int  # the run that asked: a later run of the job makes this request stale
    #: The run stopped after the hold and the job waits in the deferred set; the next run delivers the decision.
    parked: bool = False
    decision: ApprovalDecision | None = None


class Attempt(BaseModel):
    """One try at running a job."""

    number: int
    account: str | None = None
    worker: str | None = None
    outcome: Outcome | None = None
    detail: str | None = None
    session_id: str | None = None
    usage: Usage | None = None  # what this attempt consumed (the record's result.usage is the sum)
    budget_usd: float | None = None  # the max_budget_usd its run started with, when a spend cap clamped it
    change: ChangeStat | None = None  # what it changed in its workspace (a job with `workspace`)
    started_at: Timestamp
    finished_at: Timestamp | None = None


#: How an attempt's session starts: fresh, resuming or forking a given session, continuing or retaking its own
#: interrupted session, or fresh again because the session to resume is gone.
SessionMode = Literal["new", "resume", "fork", "continue", "retake", "restart"]


class PlannedSession(BaseModel):
    """How the job's first attempt started its session (kept in the record: a conversation's turn is recorded from it
    when the job ends, and a retry retakes from its `base`, however long the job's event stream has grown)."""

    mode: SessionMode  # new | resume | fork | restart (a first attempt; retries continue or retake from this)
    resume: str | None = None  # the session it resumed (or forked)
    fork: bool = False
    base: str | None = None  # the last real message of that session when the attempt began
    restarted_from: str | None = None  # the missing session a `restart` replaced


class Usage(BaseModel):
    """Tokens and dollars of a run (all models, subagents included)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float = 0.0
    model_usage: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def __add__(self, other: Usage) -> Usage:
        models = dict(self.model_usage)
        for model, usage in other.model_usage.items():
            mine = dict(models.get(model, {}))
            for key, value in usage.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    mine[key] = mine.get(key, 0) + value
                else:
                    mine.setdefault(key, value)
            models[model] = mine
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            model_usage=models,
        )


class JobResult(BaseModel):
    """What a run produced (also kept, partially, for failed and cancelled runs)."""

    text: str | None = None
    structured_output: Any = None
    stop_reason: str | None = None
    num_turns: int | None = None
    duration_ms: int | None = None
    usage: Usage = Field(default_factory=Usage)


class JobError(BaseModel):
    """Why a job failed or was cancelled."""

    kind: ErrorKind
    message: str
    retryable: bool = False


NotificationTarget = Literal["events", "webhook", "link", "link_error"]


class Notification(BaseModel):
    """The delivery log of one of a job's end notifications: its webhook, or its Celery `link` / `link_error`."""

    target: NotificationTarget
    state: Literal["pending", "delivered", "dead"] = "pending"
    attempts: int = 0
    status_code: int | None = None  # the receiver's last answer (webhook)
    error: str | None = None  # why the last attempt failed
    updated_at: Timestamp


class JobRecord(BaseModel):
    """Everything stored about a job; `public()` is the one JSON form scripts rely on."""

    id: str
    spec: JobSpec
    status: JobStatus
    attempts: list[Attempt] = Field(default_factory=list)
    account: str | None = None
    worker: str | None = None
    session_id: str | None = None
    result: JobResult | None = None
    error: JobError | None = None
    created_at: Timestamp
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    ready_at: Timestamp | None = None
    session_plan: PlannedSession | None = None  # how the first attempt started its session
    #: The end notifications (webhook, link) and what became of each (docs/notifications.md).
    notifications: list[Notification] = Field(default_factory=list)
    #: The W3C traceparent of the job's submit span when its producer traced it (docs/tracing.md): every delivery's
    #: spans continue that trace.
    traceparent: str | None = None
    #: The run's latest request for approval of a tool use (docs/jobs.md#tool-approval).
    approval: PendingApproval | None = None
    #: A coding job's change (its spec's `workspace`): the last attempt's diff against `ref`, its branch and commit.
    workspace: WorkspaceChange | None = None
    #: Why a `deferred` job waits (its last deferral's reason: an account, its tenant, a concurrency key, …).
    wait_reason: str | None = None
    #: Files the job's last attempt wrote under `$CLAUDEQ_OUTPUTS` (docs/jobs.md#artifacts).
    artifacts: Artifacts | None = None
    fence: int = 0

    @property
    def finished(self) -> bool:
        """Whether the job reached a terminal state."""
        return self.status in TERMINAL

    @property
    def parent_job_id(self) -> str | None:
        """The job whose run submitted this one (through the fleet tools), if any."""
        value = self.spec.metadata.get(PARENT_JOB_KEY)
        return value if isinstance(value, str) else None

    @property
    def trace_id(self) -> str | None:
        """The id of the job's trace (from `traceparent`), when it has one."""
        return trace_id_of(self.traceparent)

    @property
    def counted_attempts(self) -> int:
        """Attempts that count against max attempts (rate limits, lost workers and requeues do not)."""
        return sum(1 for a in self.attempts if a.outcome is not None and a.outcome not in FREE_OUTCOMES)

    @property
    def waiting_approval(self) -> bool:
        """Whether the job waits for a decision on a tool use now: its run holds its CLI (running), or the run
        stopped after the hold and the job waits in the deferred set."""
        pending = self.approval
        if pending is None or pending.decision is not None or pending.fence != self.fence:
            return False
        return self.status == "running" or (self.status == "deferred" and pending.parked)

    @property
    def shown_status(self) -> str:
        """The status shown to people: `waiting_approval` while a running job waits for a decision."""
        return "waiting_approval" if self.waiting_approval else self.status

    def public(self) -> dict[str, Any]:
        """The public JSON form (used by `--json`, the client and the MCP server)."""
        data = self.model_dump(mode="json", exclude={"fence"})
        data["status"] = self.shown_status
        data["spec"] = self.spec.model_dump(mode="json", exclude_defaults=True)
        data["trace_id"] = self.trace_id
        if self.workspace is not None:
            change = data["workspace"]
            change["patch"] = self.workspace.patch
            del change["patch_z"]
        return data


#: Every event type on a job's stream: emitters and matchers both use these names.
EventType = Literal[
    "submitted",  # producer: the record is written and the message sent
    "claimed",  # worker: a delivery took the job (data: worker, attempt)
    "session_plan",  # how the attempt's session starts (new, resume, fork, continue, retake, restart)
    "session_restarted",  # the session to resume was missing and the job allows a fresh one
    "run_started",  # the CLI is being started (data: account, model, attempt)
    "session",  # the CLI's session id
    "assistant_text",
    "tool_call",
    "tool_result",
    "api_retry",  # the CLI retries an API call itself
    "rate_limit",  # a rate-limit signal from the API
    "mirror_error",  # the transcript mirror failed to store a batch
    "result",  # the CLI's result message
    "stopped",  # the worker stopped the run (watchdog, cancel, shutdown)
    "attempt_finished",  # data: outcome, detail
    "retry",  # another attempt follows after a wait (data: reason, wait_s, next_attempt, in_place)
    "deferred",
    "requeued",
    "approval_requested",  # the run asks to use a tool that waits for a person (data: request_id, tool, input, …)
    "approval_decided",  # the answer (data: request_id, approve, by, reason)
    "succeeded",
    "failed",
    "cancelled",
    "unreadable",  # reader side: an entry that does not parse
]


class Event(BaseModel):
    """One progress event on a job's stream."""

    type: EventType
    at: Timestamp = Field(default_factory=utcnow)
    attempt: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


AccountStateName = Literal["ok", "warning", "cooling", "reserved", "disabled"]


class WindowInfo(BaseModel):
    """The last rate-limit information seen for one window of an account.

    Windows come from the CLI's RateLimitEvents and from the headers of every response the worker's pass-through
    forwards: the unified windows of OAuth accounts (`five_hour`, `seven_day`, `seven_day_opus`, …: utilization,
    reset, status) and the API-key families (`requests`, `tokens`, `input_tokens`, `output_tokens`: limit,
    remaining, reset; utilization is 1 - remaining/limit).
    """

    status: str
    utilization: float | None = None
    resets_at: Timestamp | None = None
    type: str | None = None
    seen_at: Timestamp | None = None
    limit: int | None = None  # API-key families: the limit of the current window
    remaining: int | None = None  # API-key families: what the API said is left (before this reply's own use)
    surpassed_threshold: float | None = None  # unified windows: the warning threshold the API said was passed


class Reservation(BaseModel):
    """A window that keeps new runs off an account until it resets (window-aware admission).

    `predicted`: not at the ceiling yet, but the runs in flight and one more would likely take it past.
    """

    window: str
    family: str = "-"  # the model family held back (`-`: every job)
    until: Timestamp
    utilization: float
    ceiling: float
    predicted: bool = False


class AccountState(BaseModel):
    """What Redis holds about an account (no secret ever)."""

    name: str
    state: AccountStateName = "ok"
    reason: str | None = None
    cooldown_until: Timestamp | None = None
    #: No new run until then although not cooling: the last `remaining` the API reported is spoken for by the runs
    #: in flight (requests or tokens), and the window resets then (admission before exhaustion).
    held_until: Timestamp | None = None
    held_reason: str | None = None
    #: Windows at (or, predicted, about to pass) their ceiling; a family's own window holds back only its jobs.
    reservations: list[Reservation] = Field(default_factory=list)
    #: Model families cooling on this account (a 429 on a family's own window) -> until when.
    family_cooldowns: dict[str, Timestamp] = Field(default_factory=dict)
    windows: dict[str, WindowInfo] = Field(default_factory=dict)
    slots_in_use: int = 0
    max_concurrency: int = 1
    counters: dict[str, int] = Field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The JSON form of `claudeq accounts --json`."""
        data = self.model_dump(mode="json")
        data["utilization"] = {name: w.utilization for name, w in self.windows.items()}
        data["cache_hit_ratio"] = self.cache_hit_ratio()
        return data

    def cache_hit_ratio(self) -> float | None:
        """The share of the input-side tokens its runs read from the prompt cache (None before any)."""
        read = self.counters.get("cache_read_tokens", 0)
        total = read + self.counters.get("cache_write_tokens", 0) + self.counters.get("input_tokens", 0)
        return round(read / total, 4) if total > 0 else None
