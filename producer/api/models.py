"""The HTTP API's bodies (docs/http-api.md): what it answers, and what it reads, as pydantic models.

A job spec is `claudeq.models.JobSpec` itself, the model the Python client validates: the API reads bodies as JSON
and hands them to the client's own validation, so these models only say in the OpenAPI document what a body holds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from claudeq.models import Event, JobRecord, JobSpec, JobStatus
from claudeq.schedules import Schedule, ScheduleInfo


class FieldProblem(BaseModel):
    """One refused field: its dotted path (`max_turns`, `[2].prompt` in a batch) and why."""

    field: str
    reason: str


class Problem(BaseModel):
    """An error answer: what went wrong, in words."""

    detail: str


class Refusal(Problem):
    """422: the body was refused, every problem with its field (the `JobSpecError` of the Python client)."""

    errors: list[FieldProblem]


class Submitted(BaseModel):
    """A submitted job: its id, and whether this request created it (False: its idempotency key matched)."""

    id: str
    created: bool


class BatchIn(BaseModel):
    """Jobs submitted together: all are checked first, and if any is refused none is written."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(min_length=1, max_length=1000)


class BatchOut(BaseModel):
    jobs: list[Submitted]


class JobList(BaseModel):
    """A page of the job list, newest first; `next_cursor` goes on from where the walk stopped (None: the end)."""

    jobs: list[JobRecord] = Field(description="Each as GET /jobs/{job_id} answers it.")
    next_cursor: str | None
    scanned: int = Field(description="Index entries read for this page (at most 2,000, however rare the filter).")
    unreadable: list[str] = Field(default_factory=list, description="Ids of records that could not be read.")


class EventEntry(Event):
    """One event of a job's stream, with its entry id (the `after` / `Last-Event-ID` to go on from)."""

    id: str


class EventsPage(BaseModel):
    events: list[EventEntry]
    status: JobStatus | None
    last_id: str = Field(description="The last entry id read: ask again with after=last_id for what came since.")


class Cancelled(BaseModel):
    id: str
    status: str = Field(description="`cancelled`, `running` (the worker stops it within a second) or its end.")


class TranscriptSession(BaseModel):
    session_id: str
    entries: list[dict[str, Any]]


class Transcript(BaseModel):
    sessions: list[TranscriptSession]


class ScheduleIn(BaseModel):
    """A schedule to add: a job spec fired on a cron expression or every `every_s` seconds (one of the two)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    spec: JobSpec
    cron: str | None = None
    every_s: int | None = None
    tz: str = "UTC"
    on_missed: Literal["skip", "run_once"] = "skip"
    misfire_grace_s: float = 60.0
    replace: bool = False


class ScheduleList(BaseModel):
    schedules: list[ScheduleInfo]


class AccountList(BaseModel):
    accounts: list[dict[str, Any]] = Field(description="As `claudeq accounts --json` lists them.")


class TenantList(BaseModel):
    tenants: list[dict[str, Any]] = Field(description="As `claudeq tenants --json` lists them.")


class Health(BaseModel):
    status: Literal["ok"]


__all__ = [
    "AccountList",
    "BatchIn",
    "BatchOut",
    "Cancelled",
    "EventEntry",
    "EventsPage",
    "FieldProblem",
    "Health",
    "JobList",
    "Problem",
    "Refusal",
    "Schedule",
    "ScheduleIn",
    "ScheduleList",
    "Submitted",
    "TenantList",
    "Transcript",
    "TranscriptSession",
]
