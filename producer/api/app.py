"""The HTTP API `/api/v1/` (docs/http-api.md): submit and follow jobs from any language, described by OpenAPI 3.1.

FastAPI on the Starlette `claudeq web` already runs: it routes, and it writes the OpenAPI document from the same
pydantic models the Python client uses. Bodies are read as JSON and handed to the client's own validation (a spec
goes through `Client.submit` exactly as a Python producer's does), so a refusal is the same `JobSpecError`, answered
422 with its `{field, reason}` list. Callers are the web view's (producer/web/auth.py), by `Authorization: Bearer`
only: a tenant's token acts for its tenant and sees no other's job (404, as if missing), the operator's sees all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

import redis
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.routing import Mount

from claudeq.config.settings import Settings
from claudeq.config.tenants import DEFAULT_TENANT
from claudeq.errors import ClaudeqError, ConfigError, JobNotFound, JobSpecError, RecordUnreadable
from claudeq.jobs import JobStore
from claudeq.models import JobRecord, JobSpec
from claudeq.producer.api.limits import OverRate, SubmitRate
from claudeq.producer.api.models import (
    AccountList,
    BatchIn,
    BatchOut,
    Cancelled,
    EventEntry,
    EventsPage,
    Health,
    JobList,
    Problem,
    Refusal,
    ScheduleIn,
    ScheduleList,
    Submitted,
    TenantList,
    Transcript,
    TranscriptSession,
)
from claudeq.producer.client import Client
from claudeq.producer.follow import Ended, KeepAlive, follow
from claudeq.producer.web.auth import Auth, Viewer
from claudeq.producer.web.listing import JobFilter, list_page, parse_cursor
from claudeq.schedules import Schedule, ScheduleNotFound

PREFIX = "/api/v1"
ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
SSE = "text/event-stream"

T = TypeVar("T")


class ApiError(Exception):
    """An answer other than the body asked for, with its status and what went wrong."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


def _problems(*codes: int, **more: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    """The typed error answers of a route (503 always), and `more` answers by status (`ok=`: 200)."""
    described = {
        401: "No token, or one this server does not know.",
        403: "The token may not do this (a tenant's token acting for another tenant, or on the operator's pages).",
        404: "No such job (never submitted, retention expired, or another tenant's).",
        409: "The Idempotency-Key was used for a different spec.",
        422: "Refused: every problem with its field.",
        429: "The tenant's submit rate is over its limit; Retry-After says when to try again.",
        503: "The fleet's Redis did not answer.",
    }
    answers: dict[int | str, dict[str, Any]] = {200: more["ok"]} if "ok" in more else {}
    for code in (*codes, 503):
        answers[code] = {"model": Refusal if code == 422 else Problem, "description": described[code]}
    return answers


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI requestBody of a JSON body read by the handler itself (and validated by the client)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


class Api:
    """The API over one fleet (`client`), with the callers `auth` knows: shared by every request."""

    def __init__(self, settings: Settings, client: Client, auth: Auth) -> None:
        self.settings = settings
        self.client = client
        self.auth = auth
        self.rate = SubmitRate(client.store.redis, client.store.keys, settings.tenants)

    # -- plumbing

    def record(self, viewer: Viewer, job_id: str) -> JobRecord:
        """The job's record if the caller may see it; another tenant's job is as if missing."""
        missing = ApiError(404, f"no job {job_id!r} (never submitted, or its retention expired)")
        try:
            record = self.client.get(job_id)
        except (JobNotFound, RecordUnreadable):
            raise missing from None
        if not viewer.can_see(record):
            raise missing
        return record

    def owned(self, viewer: Viewer, spec: Any) -> Any:
        """The spec as the caller may submit it: a tenant's token submits as its tenant (naming another: 403)."""
        if viewer.tenant is None or not isinstance(spec, dict):
            return spec
        named = spec.get("tenant", viewer.tenant)
        if named != viewer.tenant:
            raise ApiError(403, f"tenant: this token submits as tenant {viewer.tenant!r} only")
        return {**spec, "tenant": viewer.tenant}

    def schedule_tenant(self, viewer: Viewer, tenant: str | None) -> str:
        if viewer.tenant is not None and tenant not in (None, viewer.tenant):
            raise ApiError(403, f"tenant: this token's schedules are tenant {viewer.tenant!r}'s only")
        return viewer.tenant or tenant or DEFAULT_TENANT

    def submit(self, viewer: Viewer, spec: Any, idempotency_key: str | None) -> tuple[Submitted, bool]:
        """Submit one spec through the client; -> (answer, whether a replay of the same key and spec)."""
        if not isinstance(spec, dict):
            raise JobSpecError([("spec", "a JSON object (a job spec)")])
        spec = self.owned(viewer, spec)
        if idempotency_key is not None:
            if spec.get("idempotency_key", idempotency_key) != idempotency_key:
                raise JobSpecError([("idempotency_key", "differs from the Idempotency-Key header")])
            spec = {**spec, "idempotency_key": idempotency_key}
        self.rate.take(str(spec.get("tenant") or DEFAULT_TENANT), 1)
        handle = self.client.submit(spec)
        if not handle.created:
            # A replay answers the job it made; the same key with another spec is a conflict, not that job (a record
            # gone since, or unreadable, has no spec to compare: the key still names that job).
            try:
                existing: JobSpec | None = self.client.get(handle.id).spec
            except (JobNotFound, RecordUnreadable):
                existing = None
            if existing is not None and _comparable(existing) != _comparable(self.client.validate(spec)):
                raise ApiError(409, "Idempotency-Key: already used for a different spec")
        return Submitted(id=handle.id, created=handle.created), not handle.created


def _comparable(spec: JobSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_defaults=True)


BEARER = HTTPBearer(auto_error=False, description="A tenant's token (`mcp_token_env`) or the operator's.")


async def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
) -> Viewer:
    """Who calls: the viewer its bearer token is (401 without a known one). Async, as it does no I/O: a plain
    function would cost a thread hop per request."""
    api: Api = request.app.state.api
    viewer = api.auth.by_token(credentials.credentials) if credentials is not None else None
    if viewer is None:
        raise ApiError(401, "a token is needed: Authorization: Bearer <token>", {"www-authenticate": "Bearer"})
    return viewer


Caller = Annotated[Viewer, Depends(caller)]


def create_api(settings: Settings, client: Client, auth: Auth) -> FastAPI:
    """The `/api/v1` app over `client`'s fleet, for the callers `auth` knows (mounted at PREFIX)."""
    api = Api(settings, client, auth)
    app = FastAPI(
        title="claudeq",
        version="1",
        summary="Submit Claude agent jobs to a claudeq fleet and follow them.",
        docs_url=None,
        redoc_url=None,
        separate_input_output_schemas=False,
    )
    app.state.api = api

    async def run(call: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(call, *args)

    async def json_body(request: Request) -> Any:
        try:
            return await request.json()
        except (ValueError, UnicodeDecodeError):
            raise JobSpecError([("body", "not JSON")]) from None

    # -- jobs

    @app.post(
        "/jobs",
        status_code=201,
        response_model=Submitted,
        responses=_problems(
            401, 403, 409, 422, 429, ok={"model": Submitted, "description": "The job this Idempotency-Key made."}
        ),
        openapi_extra=_body(JobSpec),
    )
    async def submit_job(
        request: Request, viewer: Caller, idempotency_key: Annotated[str | None, Header()] = None
    ) -> Response:
        """Submit one job (the spec as JSON). With `Idempotency-Key`, the same key and spec answer the same job."""
        body = await json_body(request)
        answer, replay = await run(api.submit, viewer, body, idempotency_key)
        headers = {"location": f"{PREFIX}/jobs/{answer.id}"}
        return JSONResponse(answer.model_dump(), 200 if replay else 201, headers=headers)

    @app.post(
        "/jobs:batch",
        status_code=201,
        response_model=BatchOut,
        responses=_problems(401, 403, 422, 429),
        openapi_extra=_body(BatchIn),
    )
    async def submit_batch(request: Request, viewer: Caller) -> BatchOut:
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

    @app.get("/jobs", response_model=JobList, responses=_problems(401, 422))
    async def list_jobs(
        viewer: Caller,
        status: str | None = None,
        tenant: str | None = None,
        queue: str | None = None,
        account: str | None = None,
        conversation: str | None = None,
        parent: str | None = None,
        since: Annotated[str | None, Query(description="`15m`, `2h`, `3d` ago, or an ISO 8601 time.")] = None,
        cursor: Annotated[str | None, Query(description="`next_cursor` of the page before.")] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> Response:
        """The jobs, newest first, filtered as the web view's list is (docs/web.md)."""
        from claudeq.producer.web.app import STATUSES, parse_since

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
        wanted = JobFilter(status, tenant, queue, account, conversation, parent, since_ms)
        if viewer.tenant is not None:
            wanted = dataclasses.replace(wanted, tenant=viewer.tenant)
        page = await run(lambda: list_page(api.client, wanted, limit=limit, cursor=cursor))
        jobs = [r.public() for r in page.rows if isinstance(r, JobRecord)]
        unreadable = [r.job_id for r in page.rows if isinstance(r, RecordUnreadable) and viewer.tenant is None]
        return JSONResponse(
            {"jobs": jobs, "next_cursor": page.next_cursor, "scanned": page.scanned, "unreadable": unreadable}
        )

    @app.get("/jobs/{job_id}", response_model=JobRecord, responses=_problems(401, 404, 422))
    async def get_job(job_id: str, viewer: Caller) -> JSONResponse:
        """A job's record."""
        record = await run(api.record, viewer, job_id)
        return JSONResponse(record.public())

    @app.get(
        "/jobs/{job_id}/events",
        response_model=EventsPage,
        responses=_problems(401, 404, 422, ok={"content": {SSE: {"schema": {"type": "string"}}}}),
    )
    async def job_events(
        job_id: str,
        request: Request,
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
            status = await run(store.status, job_id)
            entries = [EventEntry(id=entry, **event.model_dump()) for entry, event in batch]
            return JSONResponse(
                EventsPage(events=entries, status=status, last_id=batch[-1][0] if batch else start).model_dump(
                    mode="json"
                )
            )
        headers = {"x-accel-buffering": "no", "cache-control": "no-store"}
        return StreamingResponse(_sse(store, job_id, start), media_type=SSE, headers=headers)

    @app.post("/jobs/{job_id}/cancel", response_model=Cancelled, responses=_problems(401, 404, 422))
    async def cancel_job(job_id: str, viewer: Caller) -> Cancelled:
        """Cancel a job: `cancelled` when it was waiting, `running` when its worker stops it now, else its end."""
        await run(api.record, viewer, job_id)
        try:
            status = await run(api.client.cancel, job_id, "cancelled through the HTTP API")
        except JobNotFound:
            raise ApiError(404, f"no job {job_id!r}") from None
        return Cancelled(id=job_id, status=status)

    @app.get("/jobs/{job_id}/transcript", response_model=Transcript, responses=_problems(401, 404, 422))
    async def job_transcript(job_id: str, viewer: Caller) -> Transcript:
        """The transcripts of the sessions the job's runs worked in (those still kept), oldest first."""
        await run(api.record, viewer, job_id)
        sessions = await run(api.client.transcript, job_id)
        return Transcript(sessions=[TranscriptSession(session_id=s, entries=e) for s, e in sessions])

    # -- schedules

    @app.get("/schedules", response_model=ScheduleList, responses=_problems(401, 403, 422))
    async def list_schedules(viewer: Caller, tenant: str | None = None) -> ScheduleList:
        """The schedules (a tenant's token: its own), with their next tick and what they fired."""
        if viewer.tenant is not None:
            tenant = api.schedule_tenant(viewer, tenant)
        return ScheduleList(schedules=await run(api.client.schedules, tenant))

    @app.post(
        "/schedules",
        status_code=201,
        response_model=Schedule,
        responses=_problems(401, 403, 422),
        openapi_extra=_body(ScheduleIn),
    )
    async def add_schedule(request: Request, viewer: Caller) -> Schedule:
        """Add a schedule: its spec is checked as a submit's is; a name in use is refused unless `replace`."""
        body = await json_body(request)
        if not isinstance(body, dict):
            raise JobSpecError([("body", "a JSON object (a schedule)")])
        unknown = sorted(set(body) - set(ScheduleIn.model_fields))
        if unknown:
            raise JobSpecError([(name, "unknown field") for name in unknown])
        rule = {k: v for k, v in body.items() if k not in ("name", "spec", "replace")}
        name, spec = body.get("name"), body.get("spec")
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise JobSpecError([("name" if not isinstance(name, str) else "spec", "required")])
        spec = api.owned(viewer, {**spec, "tenant": api.schedule_tenant(viewer, spec.get("tenant"))})
        replace = body.get("replace", False) is True
        return await run(lambda: api.client.add_schedule(name, spec, replace=replace, **rule))

    @app.delete("/schedules/{name}", status_code=204, responses=_problems(401, 403, 404, 422))
    async def remove_schedule(name: str, viewer: Caller, tenant: str | None = None) -> Response:
        """Remove a schedule (the jobs it fired stay)."""
        owner = api.schedule_tenant(viewer, tenant)
        try:
            await run(api.client.remove_schedule, name, owner)
        except ScheduleNotFound:
            raise ApiError(404, f"no schedule {name!r}") from None
        return Response(status_code=204)

    # -- the operator's

    @app.get("/accounts", response_model=AccountList, responses=_problems(401, 403))
    async def accounts(viewer: Caller) -> AccountList:
        """The fleet's accounts: state, slots in use, cooldowns, windows (the operator's token)."""
        from claudeq.account_state import AccountStore

        operator_only(viewer)
        try:
            pool = settings.accounts
        except ConfigError as exc:
            raise ApiError(503, f"accounts are not configured here: {exc.field}") from None
        store = AccountStore(client.store.redis, client.store.keys, pool)
        return AccountList(accounts=[s.public() for s in await run(store.states)])

    @app.get("/tenants", response_model=TenantList, responses=_problems(401, 403))
    async def tenants(viewer: Caller) -> TenantList:
        """The tenants: runs in flight, jobs waiting, spend against caps (the operator's token)."""
        from claudeq.tenant_state import TenantStore

        operator_only(viewer)
        try:
            pool = settings.accounts.accounts
        except ConfigError:
            pool = []
        slots = sum(a.max_concurrency for a in pool) if settings.tenants.reserve_share and pool else None
        store = TenantStore(client.store.redis, client.store.keys, settings.tenants, accounts=[a.name for a in pool])
        return TenantList(tenants=[u.public() for u in await run(lambda: store.usage(slots=slots))])

    @app.get("/healthz", response_model=Health, responses={503: {"model": Problem, "description": "Redis is down."}})
    async def healthz() -> Health:
        """Whether this server reaches the fleet's Redis (no token needed)."""
        await run(client.store.redis.ping)
        return Health(status="ok")

    # -- errors, typed

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(Problem(detail=exc.detail).model_dump(), exc.status, headers=exc.headers)

    @app.exception_handler(JobSpecError)
    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, JobSpecError)
        errors = [{"field": f, "reason": r} for f, r in exc.errors] or [{"field": "spec", "reason": str(exc)}]
        return JSONResponse({"detail": "refused: " + str(exc), "errors": errors}, 422)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"field": ".".join(str(p) for p in e["loc"][1:]) or str(e["loc"][0]), "reason": str(e["msg"])}
            for e in exc.errors()
        ]
        detail = "refused: " + "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
        return JSONResponse({"detail": detail, "errors": errors}, 422)

    @app.exception_handler(OverRate)
    async def on_over_rate(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, OverRate)
        return JSONResponse({"detail": str(exc)}, 429, headers={"retry-after": str(exc.retry_after_s)})

    @app.exception_handler(redis.RedisError)
    async def on_store_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": f"the fleet's Redis did not answer ({exc.__class__.__name__})"}, 503)

    @app.exception_handler(ClaudeqError)
    async def on_fleet_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, 503)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes, servers=[{"url": PREFIX}]
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            # The bodies the handlers read themselves, as their models give them (FastAPI's rendering of the same
            # models, met in answers, drops their defaults): a job spec's schema is exactly JobSpec's.
            for model in (BatchIn, ScheduleIn, JobSpec):
                found = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(found.pop("$defs", {}))
                schemas[model.__name__] = found
            # A record as `public()` gives it: with its trace's id (a property of the model, not a field).
            trace_id = {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "The job's trace id."}
            schemas["JobRecord"]["properties"]["trace_id"] = trace_id
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def mount(app: FastAPI) -> Mount:
    """The route taking every path under PREFIX to the API. Starlette's pattern stops at a newline, which a path may
    hold (encoded): such a request is the API's all the same, answered by it in JSON."""
    route = Mount(PREFIX, app=app)
    route.path_regex = re.compile(route.path_regex.pattern, re.DOTALL)
    return route


def operator_only(viewer: Viewer) -> None:
    if not viewer.operator:
        raise ApiError(403, "this needs the operator's token (CLAUDEQ_WEB_TOKEN)")


def _per_tenant(specs: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for spec in specs:
        tenant = spec.get("tenant", DEFAULT_TENANT) if isinstance(spec, dict) else DEFAULT_TENANT
        key = tenant if isinstance(tenant, str) else DEFAULT_TENANT
        counts[key] = counts.get(key, 0) + 1
    return counts


async def _sse(store: JobStore, job_id: str, after: str) -> AsyncIterator[str]:
    """Server-sent events: each event after `after` as it comes (its entry id as the SSE id), then `end` with the
    job's status (producer/follow.py reads them)."""
    async for item in follow(store, job_id, after):
        if isinstance(item, Ended):
            yield f"event: end\ndata: {json.dumps({'status': item.status})}\n\n"
        elif isinstance(item, KeepAlive):
            yield ": keep-alive\n\n"
        else:
            entry_id, event = item
            yield f"id: {entry_id}\ndata: {EventEntry(id=entry_id, **event.model_dump()).model_dump_json()}\n\n"
