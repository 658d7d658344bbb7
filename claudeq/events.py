"""What each event of a job's stream says: one model per event type (`EVENT_DATA`, keyed by EventType).

An `Event` (claudeq/models.py) is the envelope: its type, when, the attempt, and `data`, the dict its public JSON
form holds (docs/jobs.md#events). Every event claudeq emits is built from its type's model here
(`Claimed(worker=w, attempt=2).event(attempt=2)`), so an emitter cannot leave out a field or misspell one, and the
stored form is the model's fields as the emitter set them (a field left at its default is not written, as before).
A reader that wants the fields typed asks `data_of(event)`, which gives the type's model; one that shows events as
they are (the CLI, the run view) keeps reading the dict. Fields an emitter of a newer version adds are kept: each
model allows them, so an older reader shows them and passes them on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from claudeq.models import ErrorKind, Event, EventType, JobError, Outcome, SessionMode, TerminalStatus


class EventData(BaseModel):
    """The `data` of one type of event; subclasses name their type (`event_type`)."""

    model_config = ConfigDict(extra="allow")

    #: The event type this model is the data of.
    event_type: ClassVar[EventType]

    def event(self, attempt: int | None = None, at: datetime | None = None) -> Event:
        """This data as an event (at `at`, else now), of attempt `attempt` when it belongs to one."""
        # What model_dump(mode="json", exclude_unset=True) returns, from the serializer it calls, without its wrapper
        # passing the other arguments at their defaults: a job's run emits ~8 events on the engine loop
        # (docs/scaling.md#the-engines-redis-client).
        data = self.__pydantic_serializer__.to_python(self, mode="json", exclude_unset=True)
        if at is None:
            return Event(type=self.event_type, attempt=attempt, data=data)
        return Event(type=self.event_type, attempt=attempt, data=data, at=at)


class TokensSoFar(BaseModel):
    """What an attempt has used so far, from the stream (`claudeq top` shows a running job's tokens)."""

    input: int
    output: int


class Submitted(EventData):
    """The record is written and the message sent: read from the record (JobStore.read_events), never stored."""

    event_type: ClassVar[EventType] = "submitted"
    queue: str | None


class Claimed(EventData):
    """A delivery took the job."""

    event_type: ClassVar[EventType] = "claimed"
    worker: str
    attempt: int


class SessionPlanned(EventData):
    """How the attempt's session starts."""

    event_type: ClassVar[EventType] = "session_plan"
    mode: SessionMode
    resume: str | None
    fork: bool
    resume_at: str | None
    base: str | None


class SessionRestarted(EventData):
    """The session to resume was missing and the job allows a fresh one."""

    event_type: ClassVar[EventType] = "session_restarted"
    missing_session_id: str


class RunStarted(EventData):
    """The CLI is being started (`warm`: only a run on a warm CLI's path says whether it was; `reason`: why its
    account was chosen, `warm cache` or `least used`, docs/architecture.md#cache-affinity)."""

    event_type: ClassVar[EventType] = "run_started"
    account: str
    model: str | None
    attempt: int
    warm: bool | None = None
    reason: str | None = None


class SessionStarted(EventData):
    """The CLI's session id."""

    event_type: ClassVar[EventType] = "session"
    session_id: str
    tokens_so_far: TokensSoFar | None = None  # when it is the last event of an assistant message


class AssistantText(EventData):
    """A text block of the model's answer (redacted, truncated)."""

    event_type: ClassVar[EventType] = "assistant_text"
    text: str
    tokens_so_far: TokensSoFar | None = None


class ToolCalled(EventData):
    """A tool the model called: its name, its use id and its input as JSON text (redacted, truncated)."""

    event_type: ClassVar[EventType] = "tool_call"
    tool: str
    id: str
    input: str
    tokens_so_far: TokensSoFar | None = None


class ToolResult(EventData):
    """A tool's result (redacted, truncated; `chars`: the whole result's length when it was cut)."""

    event_type: ClassVar[EventType] = "tool_result"
    id: str
    is_error: bool
    text: str
    chars: int | None = None


class ApiRetry(EventData):
    """The CLI retries an API call itself: its fields as the CLI said them."""

    event_type: ClassVar[EventType] = "api_retry"
    attempt: Any
    error_status: Any
    error: Any
    delay_ms: Any


class RateLimited(EventData):
    """A rate-limit signal from the API."""

    event_type: ClassVar[EventType] = "rate_limit"
    status: str
    window: str | None
    utilization: float | None
    resets_at: str | None


class MirrorError(EventData):
    """The transcript mirror failed to store a batch."""

    event_type: ClassVar[EventType] = "mirror_error"
    detail: str


class ResultReceived(EventData):
    """The CLI's result message."""

    event_type: ClassVar[EventType] = "result"
    is_error: bool
    subtype: str | None
    num_turns: int | None
    duration_ms: int | None
    cost_usd: float | None
    stop_reason: str | None


class Stopped(EventData):
    """The worker stopped the run (watchdog, cancel, shutdown)."""

    event_type: ClassVar[EventType] = "stopped"
    reason: str


class AttemptFinished(EventData):
    """An attempt ended: its outcome and what it means."""

    event_type: ClassVar[EventType] = "attempt_finished"
    outcome: Outcome
    detail: str


class RetryScheduled(EventData):
    """Another attempt follows after a wait."""

    event_type: ClassVar[EventType] = "retry"
    reason: str
    wait_s: float
    next_attempt: int
    in_place: bool


class Deferred(EventData):
    """The job waits until `ready_at` (ISO 8601)."""

    event_type: ClassVar[EventType] = "deferred"
    ready_at: str
    reason: str


class Requeued(EventData):
    """The job went back to its queue."""

    event_type: ClassVar[EventType] = "requeued"
    reason: str


class ApprovalRequested(EventData):
    """The run asks to use a tool that waits for a person's approval (docs/jobs.md#tool-approval)."""

    event_type: ClassVar[EventType] = "approval_requested"
    request_id: str
    tool: str
    input: dict[str, Any]
    tool_use_id: str | None = None
    expires_at: str


class ApprovalDecided(EventData):
    """The answer to an approval request: who (`operator`, `tenant:<name>`, `timeout`), when (`at`) and why."""

    event_type: ClassVar[EventType] = "approval_decided"
    request_id: str
    approve: bool
    by: str
    reason: str | None = None
    decided_at: str


class Succeeded(EventData):
    """The job ended well (its result is in the record)."""

    event_type: ClassVar[EventType] = "succeeded"


class Failed(EventData):
    """The job failed: the record's error."""

    event_type: ClassVar[EventType] = "failed"
    kind: ErrorKind
    message: str


class Cancelled(EventData):
    """The job was cancelled: by the worker (the record's error: `kind`, `message`) or, before any worker had it, by
    the producer (`reason`)."""

    event_type: ClassVar[EventType] = "cancelled"
    kind: ErrorKind | None = None
    message: str | None = None
    reason: str | None = None


class Unreadable(EventData):
    """The reader's own: a stored entry that does not parse (its first 200 characters)."""

    event_type: ClassVar[EventType] = "unreadable"
    raw: str


#: The data model of every event type.
EVENT_DATA: dict[EventType, type[EventData]] = {
    model.event_type: model
    for model in (
        Submitted,
        Claimed,
        SessionPlanned,
        SessionRestarted,
        RunStarted,
        SessionStarted,
        AssistantText,
        ToolCalled,
        ToolResult,
        ApiRetry,
        RateLimited,
        MirrorError,
        ResultReceived,
        Stopped,
        AttemptFinished,
        RetryScheduled,
        Deferred,
        Requeued,
        ApprovalRequested,
        ApprovalDecided,
        Succeeded,
        Failed,
        Cancelled,
        Unreadable,
    )
}
assert set(EVENT_DATA) == set(get_args(EventType)), "every event type has its data model"


def data_of(event: Event) -> EventData | None:
    """`event`'s data as its type's model; None when it does not fit (an entry an older version wrote)."""
    try:
        return EVENT_DATA[event.type].model_validate(event.data)
    except ValidationError:
        return None


def session_of(event: Event) -> str | None:
    """The session id a `session` event names; None for any other event (or one that names none)."""
    if event.type != "session":
        return None
    data = data_of(event)
    return data.session_id if isinstance(data, SessionStarted) and data.session_id else None


def ended(status: TerminalStatus, error: JobError | None = None, attempt: int | None = None) -> Event:
    """The event of a job's end in `status`: the record's `error` when it failed or was cancelled (required then)."""
    if status == "succeeded":
        return Succeeded().event(attempt)
    if error is None:
        raise ValueError(f"a job that ends {status} has an error")
    data = Failed if status == "failed" else Cancelled
    return data(kind=error.kind, message=error.message).event(attempt)
