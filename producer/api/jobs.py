"""The HTTP API's jobs (docs/http-api.md#endpoints): submit one or many, read, list, follow, cancel, transcript."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from claudeq.errors import JobNotFound, JobSpecError, RecordUnreadable
from claudeq.follow import Ended, KeepAlive, follow
from claudeq.jobs import JobStore
from claudeq.models import JobRecord, JobSpec
from claudeq.script_calls import run_call

from ...config.tenants import DEFAULT_TENANT
from ..web.listing import JobFilter, list_page, parse_cursor
from .core import (
    ENTRY_ID,
    PREFIX,
    SSE,
    ApiDep,
    ApiError,
    Caller,
    body_of,
    json_body,
    problems,
    run,
)
from .models import (
    BatchIn,
    BatchOut,
    Cancelled,
    EventEntry,
    EventsPage,
    JobList,
    Submitted,
    Transcript,
    TranscriptSession,
)

router = APIRouter()


@router.post(
    "/jobs",
    status_code=201,
    response_model=Submitted,
    responses=problems(
        401, 403, 409, 422, 429, ok={"model": Submitted, "description": "The job this Idempotency-Key made."}
    ),
    openapi_extra=body_of(JobSpec),
)
async def submit_job(
    request: Request, api: ApiDep, viewer: Caller, idempotency_key: Annotated[str | None, Header()] = None
) -> Response:
    """Submit one job (the spec as JSON). With `Idempotency-Key`, the same key and spec answer the same job."""
    body = await json_body(request)
    answer, replay = await run(api.submit, viewer, body, idempotency_key)
    headers = {"location": f"{PREFIX}/jobs/{answer.id}"}
    return JSONResponse(answer.model_dump(), 200 if replay else 201, headers=headers)


@router.post(
    "/jobs:batch",
    status_code=201,
    response_model=BatchOut,
    responses=problems(401, 403, 422, 429),
    openapi_extra=body_of(BatchIn),
)
async def submit_batch(request: Request, api: ApiDep, viewer: Caller) -> BatchOut:
    """Submit many jobs at once: every spec is checked first, and if any is refused none is written."""
    body = await json_body(request)
    jobs = body.get("jobs") if isinstance(body, dict) else None
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= 1000 or set(body) != {"jobs"}:
        raise JobSpecError([("jobs", "a list of 1 to 1000 job specs, and nothing else in the body")])
    specs = [api.owned(viewer, spec) for spec in jobs]
    for tenant, count in _per_tenant(specs).items():
        await run(api.rate.take, tenant, count)
    handles = await run(api.client.submit_many, specs)
    return BatchOut(jobs=[Submitted(id=h.id, created=h.created) for h in handles])


class JobsQuery(BaseModel):
    """`GET /jobs`'s query parameters: the web view's filters, and the page."""

    status: str | None = None
    tenant: str | None = None
    queue: str | None = None
    account: str | None = None
    conversation: str | None = None
    parent: str | None = None
    since: str | None = Field(None, description="`15m`, `2h`, `3d` ago, or an ISO 8601 time.")
    cursor: str | None = Field(None, description="`next_cursor` of the page before.")
    limit: int = Field(50, ge=1, le=200)


@router.get("/jobs", response_model=JobList, responses=problems(401, 422))
async def list_jobs(api: ApiDep, viewer: Caller, query: Annotated[JobsQuery, Query()]) -> Response:
    """The jobs, newest first, filtered as the web view's list is (docs/web.md)."""
    from ..web.app import STATUSES, parse_since

    status, since, cursor = query.status, query.since, query.cursor
    problems = []
    if status is not None and status not in STATUSES:
        problems.append(("status", f"one of {', '.join(STATUSES)}"))
    since_ms = None
    if since:
        try:
            since_ms = parse_since(since)
        except (ValueError, OverflowError) as exc:
            problems.append(("since", str(exc).removeprefix("since: ")))
    try:
        parse_cursor(cursor)
    except ValueError as exc:
        problems.append(("cursor", str(exc).removeprefix("cursor: ")))
    if problems:
        raise JobSpecError(problems)
    wanted = JobFilter(status, query.tenant, query.queue, query.account, query.conversation, query.parent, since_ms)
    if viewer.tenant is not None:
        wanted = dataclasses.replace(wanted, tenant=viewer.tenant)
    page = await run(lambda: list_page(api.client, wanted, limit=query.limit, cursor=cursor))
    jobs = [r.public() for r in page.rows if isinstance(r, JobRecord)]
    unreadable = [r.job_id for r in page.rows if isinstance(r, RecordUnreadable) and viewer.tenant is None]
    return JSONResponse(
        {"jobs": jobs, "next_cursor": page.next_cursor, "scanned": page.scanned, "unreadable": unreadable}
    )


@router.get("/jobs/{job_id}", response_model=JobRecord, responses=problems(401, 404, 422))
async def get_job(job_id: str, api: ApiDep, viewer: Caller) -> JSONResponse:
    """A job's record."""
    record = await run(api.record, viewer, job_id)
    return JSONResponse(record.public())


@router.get(
    "/jobs/{job_id}/events",
    response_model=EventsPage,
    responses=problems(401, 404, 422, ok={"content": {SSE: {"schema": {"type": "string"}}}}),
)
async def job_events(
    job_id: str,
    request: Request,
    api: ApiDep,
    viewer: Caller,
    after: Annotated[str, Query(description="The entry id to read after (`0-0`: from the start).")] = "0-0",
    last_event_id: Annotated[str | None, Header(description="Resume a stream after this entry id.")] = None,
) -> Response:
    """The job's events after `after`, as JSON; or, asked with `Accept: text/event-stream`, every event as it
    comes until the job ends (each with its entry id as the SSE id, so a client resumes with Last-Event-ID),
    then an `end` event with the job's status."""
    start = last_event_id if last_event_id is not None else after
    if not ENTRY_ID.match(start):
        field = "last-event-id" if last_event_id is not None else "after"
        raise JobSpecError([(field, "an event entry id, e.g. 1733600000000-0")])
    await run(api.record, viewer, job_id)
    store = api.client.store
    if SSE not in request.headers.get("accept", ""):
        batch = await run(store.read_events, job_id, start)
        status = await run(run_call, store.status_call(job_id))
        entries = [EventEntry(id=entry, **event.model_dump()) for entry, event in batch]
        return JSONResponse(
            EventsPage(events=entries, status=status, last_id=batch[-1][0] if batch else start).model_dump(mode="json")
        )
    headers = {"x-accel-buffering": "no", "cache-control": "no-store"}
    return StreamingResponse(_sse(store, job_id, start), media_type=SSE, headers=headers)


@router.post("/jobs/{job_id}/cancel", response_model=Cancelled, responses=problems(401, 404, 422))
async def cancel_job(job_id: str, api: ApiDep, viewer: Caller) -> Cancelled:
    """Cancel a job: `cancelled` when it was waiting, `running` when its worker stops it now, else its end."""
    await run(api.record, viewer, job_id)
    try:
        status = await run(api.client.cancel, job_id, "cancelled through the HTTP API")
    except JobNotFound:
        raise ApiError(404, f"no job {job_id!r}") from None
    return Cancelled(id=job_id, status=status)


@router.get("/jobs/{job_id}/transcript", response_model=Transcript, responses=problems(401, 404, 422))
async def job_transcript(job_id: str, api: ApiDep, viewer: Caller) -> Transcript:
    """The transcripts of the sessions the job's runs worked in (those still kept), oldest first."""
    await run(api.record, viewer, job_id)
    sessions = await run(api.client.transcript, job_id)
    return Transcript(sessions=[TranscriptSession(session_id=s, entries=e) for s, e in sessions])


def _per_tenant(specs: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for spec in specs:
        tenant = spec.get("tenant", DEFAULT_TENANT) if isinstance(spec, dict) else DEFAULT_TENANT
        key = tenant if isinstance(tenant, str) else DEFAULT_TENANT
        counts[key] = counts.get(key, 0) + 1
    return counts


async def _sse(store: JobStore, job_id: str, after: str) -> AsyncIterator[str]:
    """Server-sent events: each event after `after` as it comes (its entry id as the SSE id), then `end` with the
    job's status (claudeq/follow.py reads them)."""
    async for item in follow(store, job_id, after):
        if isinstance(item, Ended):
            yield f"event: end\ndata: {json.dumps({'status': item.status})}\n\n"
        elif isinstance(item, KeepAlive):
            yield ": keep-alive\n\n"
        else:
            entry_id, event = item
            yield f"id: {entry_id}\ndata: {EventEntry(id=entry_id, **event.model_dump()).model_dump_json()}\n\n"
