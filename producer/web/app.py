"""`claudeq web`: the run view — jobs, one job's story live, the fleet — as server-rendered pages (docs/web.md).

Pages are Jinja templates with autoescaping on (every string an agent wrote is untrusted); the only script is
static/app.js, which follows a running job's events over server-sent events and appends the rows the server
renders. Reads go through the producer's `Client` and stores, the same ones `claudeq events --follow`, `claudeq top`
and `claudeq tenants` use; nothing here writes but cancel and resubmit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import redis
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from claudeq.errors import ApprovalRefused, ClaudeqError, ConfigError, JobNotFound, JobSpecError, RecordUnreadable
from claudeq.follow import Ended, KeepAlive, follow
from claudeq.models import TERMINAL, Event, JobRecord, JobStatus, utcnow
from claudeq.script_calls import run_call

from ...config.settings import Settings
from ..client import Client
from ..progress import describe
from ..transcript_view import LABELS, conversation
from .auth import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_TTL_S,
    Auth,
    Viewer,
    csrf_token,
    safe_next,
    same_site_post,
)
from .charts import (
    Chart,
    account_gauges,
    account_history,
    finished_per_hour,
    finished_per_minute,
    spend_per_hour,
)
from .hosts import HostAllowList, HostGuard
from .listing import JobFilter, children_of, list_page, parse_cursor
from .patch import sections
from .timeline import draw as draw_timeline

HERE = Path(__file__).parent
STATUSES: tuple[str, ...] = get_args(JobStatus)
#: Rows per list page; events rendered at most on a job's page (the rest: `claudeq events ID`).
PAGE_ROWS = 50
MAX_EVENTS = 2_000
#: Longest free text shown in one event row or transcript entry.
ROW_TEXT = 4_000

SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # (no-referrer makes a browser send `Origin: null` on its own POSTs)
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


class NotLoggedIn(Exception):
    """The request carries no token this server knows (a page answers with the login form)."""


class WebError(Exception):
    """An answer other than the page: 400 (bad input, with the field), 403, 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---- formatting (Jinja filters) -----------------------------------------------------------------------------------


def clip(value: Any, limit: int = 80) -> str:
    """One line of at most `limit` characters."""
    line = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def block(value: Any, limit: int = ROW_TEXT) -> str:
    """Free text (or JSON) of at most `limit` characters, its lines kept."""
    body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, default=str)
    return body if len(body) <= limit else body[:limit] + f"\n… ({len(body) - limit} more characters)"


def age(at: datetime | None, now: datetime | None = None) -> str:
    if at is None:
        return ""
    seconds = max(0.0, ((now or datetime.now(UTC)) - at).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    return f"{(end - start).total_seconds():.1f} s"


def money(value: float | None) -> str:
    return "" if not value else f"${value:.4f}"


def when(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def ms_when(ms: int | None) -> str:
    return "" if ms is None else when(datetime.fromtimestamp(ms / 1000, UTC))


SINCE = re.compile(r"^(\d+)\s*([smhd])$")


def parse_since(value: str, now: datetime | None = None) -> int:
    """`15m`, `2h`, `3d` (ago) or an ISO 8601 time -> epoch ms; ValueError when neither."""
    value = value.strip()
    found = SINCE.match(value)
    now = now or datetime.now(UTC)
    if found:
        seconds = int(found[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[found[2]]
        return int((now - timedelta(seconds=seconds)).timestamp() * 1000)
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("since: give a duration ago (15m, 2h, 3d) or an ISO 8601 time") from None
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)


# ---- events as rows -----------------------------------------------------------------------------------------------


def event_row(entry_id: str, event: Event) -> dict[str, Any] | None:
    """What a job's page shows of one event: a headline and, for text and tools, the body (None: not shown)."""
    d = event.data
    headline = describe(event)
    body: str | None = None
    kind = event.type
    if kind == "assistant_text":
        headline, body = "assistant", block(d.get("text", ""))
    elif kind == "tool_call":
        headline, body = f"tool call {d.get('tool', '?')}", block(d.get("input", ""))
    elif kind == "tool_result":
        headline = "tool error" if d.get("is_error") else "tool result"
        body = block(d.get("text", ""))
    if headline is None:
        return None
    return {
        "id": entry_id,
        "at": event.at.astimezone(UTC).strftime("%H:%M:%S"),
        "attempt": event.attempt,
        "type": kind,
        "headline": headline,
        "body": body,
    }


def timeline(record: JobRecord, events: list[tuple[str, Event]]) -> list[dict[str, Any]]:
    """The attempts with what the events say of each: the retry that led to it (reason, wait) and its waits."""
    before: dict[int, list[str]] = {}
    for _, event in events:
        d = event.data
        if event.type == "retry" and isinstance(d.get("next_attempt"), int):
            where = "in place" if d.get("in_place") else "requeued"
            before.setdefault(d["next_attempt"], []).append(
                f"retry after {d.get('reason', '?')}: waited {d.get('wait_s', '?')} s, {where}"
            )
        elif event.type == "deferred":
            before.setdefault((event.attempt or 0) + 1, []).append(
                f"waited until {d.get('ready_at', '?')}: {clip(d.get('reason', ''), 160)}"
            )
    rows = []
    for a in record.attempts:
        usage = a.usage
        rows.append(
            {
                "number": a.number,
                "account": a.account or "",
                "worker": a.worker or "",
                "outcome": a.outcome or ("running" if a.finished_at is None else ""),
                "detail": a.detail if a.detail and a.detail != a.outcome else "",
                "started": when(a.started_at),
                "took": duration(a.started_at, a.finished_at),
                "usage": usage,
                "before": before.get(a.number, []),
            }
        )
    return rows


# ---- the app ------------------------------------------------------------------------------------------------------


class Web:
    """The pages over one fleet (`client`): shared by every request."""

    def __init__(self, settings: Settings, client: Client | None = None, start_token: str | None = None) -> None:
        self.settings = settings
        self.client = client or Client(settings)
        self.auth = Auth(settings, start_token)
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(clip=clip, block=block, age=age, money=money, when=when, ms_when=ms_when)
        self.env.globals.update(block_labels=LABELS)

    # -- plumbing

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        viewer: Viewer | None = getattr(request.state, "viewer", None)
        body = self.env.get_template(name).render(
            request=request, viewer=viewer, auth_required=self.auth.required, csrf=csrf_token(request), **context
        )
        return HTMLResponse(body, status_code=status)

    def viewer(self, request: Request) -> Viewer:
        viewer = self.auth.viewer(request)
        if viewer is None:
            raise NotLoggedIn
        request.state.viewer = viewer
        return viewer

    def record(self, viewer: Viewer, job_id: str) -> JobRecord:
        """The job's record, if the viewer may see it; another tenant's job is as if missing (the MCP rule)."""
        missing = WebError(404, f"no job {job_id!r} (never submitted, or its retention expired)")
        try:
            record = self.client.get(job_id)
        except JobNotFound:
            raise missing from None
        except RecordUnreadable as exc:
            if viewer.tenant is not None:
                raise missing from None
            raise WebError(500, f"job {job_id!r}: record unreadable: {exc.detail}") from None
        if not viewer.can_see(record):
            raise missing
        return record

    async def form(self, request: Request) -> dict[str, str]:
        form = await request.form()
        if not same_site_post(request, form.get(CSRF_FIELD), self.settings.web_origin):
            raise WebError(403, "this action must come from a claudeq web page (cross-site request refused)")
        return {k: v for k, v in form.items() if isinstance(v, str)}

    # -- pages

    def index(self, request: Request) -> Response:
        """The job list; `/?token=…` (the address the command prints) logs in first, then leaves the address bar."""
        token = request.query_params.get("token")
        if token is None:
            return RedirectResponse("/jobs", status_code=303)
        sid = self.auth.login(token)
        if sid is None:
            return PlainTextResponse("that token is not one this server knows", 401)
        return self.logged_in(RedirectResponse("/jobs", status_code=303), sid)

    @staticmethod
    def logged_in(response: Response, sid: str) -> Response:
        response.set_cookie(SESSION_COOKIE, sid, max_age=SESSION_TTL_S, httponly=True, samesite="strict")
        return response

    def login_page(self, request: Request) -> Response:
        return self.page(request, "login.html", next=safe_next(request.query_params.get("next")), failed=False)

    async def login(self, request: Request) -> Response:
        form = await self.form(request)
        sid = self.auth.login(form.get("token", ""))
        target = safe_next(form.get("next"))
        if sid is None:
            return self.page(request, "login.html", status=401, next=target, failed=True)
        return self.logged_in(RedirectResponse(target, status_code=303), sid)

    async def logout(self, request: Request) -> Response:
        await self.form(request)
        self.auth.logout(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    def jobs(self, request: Request) -> Response:
        viewer = self.viewer(request)
        q = request.query_params
        given = {k: q.get(k, "").strip() for k in ("status", "tenant", "queue", "account", "conversation", "parent")}
        since = q.get("since", "").strip()
        problem = None
        wanted = JobFilter()
        try:
            if given["status"] and given["status"] not in STATUSES:
                raise ValueError(f"status: one of {', '.join(STATUSES)}")
            parse_cursor(q.get("cursor"))
            wanted = JobFilter(
                **{k: (v or None) for k, v in given.items()},
                since_ms=parse_since(since) if since else None,
            )
        except ValueError as exc:
            problem = str(exc)
        if viewer.tenant is not None:  # a tenant's token lists its own jobs, whatever the form says
            wanted = dataclasses.replace(wanted, tenant=viewer.tenant)
            given["tenant"] = viewer.tenant
        page = None
        if problem is None:
            page = list_page(self.client, wanted, limit=PAGE_ROWS, cursor=q.get("cursor"))
        params = {k: v for k, v in {**given, "since": since}.items() if v}
        return self.page(
            request,
            "jobs.html",
            status=400 if problem else 200,
            page=page,
            given=given,
            since=since,
            params=params,
            statuses=STATUSES,
            problem=problem,
            default_queue=self.settings.queue,
            page_rows=PAGE_ROWS,
            now=datetime.now(UTC),
        )

    def job(self, request: Request) -> Response:
        viewer = self.viewer(request)
        job_id = request.path_params["job_id"]
        record = self.record(viewer, job_id)
        events = self.client.store.read_events(job_id, count=MAX_EVENTS)
        rows = [row for entry_id, event in events if (row := event_row(entry_id, event)) is not None]
        after = events[-1][0] if events else "0-0"
        children = children_of(self.client, record, PAGE_ROWS)
        dependencies = [
            (dep, found if isinstance(found, JobRecord) and viewer.can_see(found) else None)
            for dep, found in zip(
                record.spec.depends_on, run_call(self.client.store.records_call(record.spec.depends_on)), strict=True
            )
        ]
        now = datetime.now(UTC)
        summary: dict[str, Any] = {
            "record": record,
            "attempts": timeline(record, events),
            "drawing": draw_timeline(record, [event for _, event in events], now),
            "default_queue": self.settings.queue,
            "now": now,
        }
        if request.query_params.get("part") == "summary":  # what the live page fetches again (static/app.js)
            return self.page(request, "_summary.html", **summary)
        turns = []
        if record.spec.conversation:
            turns = self.client._conversations.turns(record.spec.conversation, record.spec.tenant)
        public = record.public()
        change = record.workspace
        if change is not None and change.patch_archived:  # too large for the record: read from the archive
            change = self.client.diff(record.id) or change
            summary["record"] = record.model_copy(update={"workspace": change})
        change_files, change_cut = sections(change.patch or "") if change else ([], False)
        return self.page(
            request,
            "job.html",
            **summary,
            change_files=change_files,
            change_cut=change_cut,
            spec_json=json.dumps(public["spec"], indent=2, ensure_ascii=False),
            record_json=json.dumps({k: v for k, v in public.items() if k != "spec"}, indent=2, ensure_ascii=False),
            rows=rows,
            truncated=len(events) >= MAX_EVENTS,
            after=after,
            live=record.status not in TERMINAL,
            children=children,
            dependencies=dependencies,
            turns=turns,
        )

    def artifact(self, request: Request) -> Response:
        """One of the job's artifacts, as a download (never rendered: an agent wrote it; docs/jobs.md#artifacts)."""
        viewer = self.viewer(request)
        record = self.record(viewer, request.path_params["job_id"])
        name = request.path_params["name"]
        if record.artifacts is None or name not in {a.name for a in record.artifacts.files}:
            raise WebError(404, f"job {record.id!r} has no artifact {name!r}")
        try:
            data = self.client.artifact(record.id, name)
        except JobNotFound:
            raise WebError(404, f"job {record.id!r}: artifact {name!r} is no longer kept") from None
        filename = name.rsplit("/", 1)[-1]
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{_quote(filename)}"}
        return Response(data, media_type="application/octet-stream", headers=headers)

    def transcript(self, request: Request) -> Response:
        viewer = self.viewer(request)
        record = self.record(viewer, request.path_params["job_id"])
        sessions = self.client.transcript(record.id)
        raw = request.query_params.get("raw") == "1"  # the entries themselves, on demand
        talks = [(session_id, entries, conversation(entries)) for session_id, entries in sessions]
        return self.page(request, "transcript.html", record=record, sessions=talks, raw=raw)

    async def stream(self, request: Request) -> Response:
        """Server-sent events: each new event of the job as a rendered row, then its end (the CLI's follow)."""
        viewer = self.viewer(request)
        job_id = request.path_params["job_id"]
        await asyncio.to_thread(self.record, viewer, job_id)
        after = request.query_params.get("after") or "0-0"
        if not re.fullmatch(r"\d+-\d+", after):
            raise WebError(400, "after: an event id (ms-seq)")
        row_template = self.env.get_template("_event.html")
        store = self.client.store

        async def frames() -> AsyncIterator[str]:
            # A browser that goes away cancels this (StreamingResponse listens for it).
            async for item in follow(store, job_id, after):
                if isinstance(item, Ended):
                    yield f"event: end\ndata: {json.dumps({'status': item.status})}\n\n"
                elif isinstance(item, KeepAlive):
                    yield ": keep-alive\n\n"
                elif (row := event_row(*item)) is not None:
                    html = row_template.render(row=row)
                    yield f"id: {item[0]}\ndata: {json.dumps({'html': html, 'type': item[1].type})}\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def cancel(self, request: Request) -> Response:
        viewer = self.viewer(request)
        await self.form(request)
        job_id = request.path_params["job_id"]
        await asyncio.to_thread(self.record, viewer, job_id)
        try:
            await asyncio.to_thread(self.client.cancel, job_id, "cancelled from claudeq web")
        except JobNotFound:
            raise WebError(404, f"no job {job_id!r}") from None
        return RedirectResponse(f"/jobs/{job_id}", status_code=303)

    async def approve(self, request: Request) -> Response:
        """Answer the tool use the job waits on (docs/jobs.md#tool-approval), as the viewer's tenant (or the
        operator): `decision` approve|deny, `reason`, `request_id`."""
        viewer = self.viewer(request)
        form = await self.form(request)
        job_id = request.path_params["job_id"]
        await asyncio.to_thread(self.record, viewer, job_id)
        decide = functools.partial(
            self.client.approve,
            job_id,
            form.get("decision") != "deny",
            form.get("reason") or None,
            request_id=form.get("request_id") or None,
            tenant=viewer.tenant,
        )
        try:
            await asyncio.to_thread(decide)
        except JobNotFound:
            raise WebError(404, f"no job {job_id!r}") from None
        except ApprovalRefused as exc:
            raise WebError(409, str(exc)) from None
        return RedirectResponse(f"/jobs/{job_id}", status_code=303)

    def approvals(self, request: Request) -> Response:
        """The jobs waiting for a decision on a tool use (the viewer's tenant's only, with a tenant's token)."""
        viewer = self.viewer(request)
        return self.page(request, "approvals.html", records=self.client.approvals(viewer.tenant), now=utcnow())

    async def resubmit(self, request: Request) -> Response:
        """A new job with the same spec (without its idempotency key, so it is a new job), which records where it
        came from in its metadata (`resubmitted_from`)."""
        viewer = self.viewer(request)
        await self.form(request)
        record = await asyncio.to_thread(self.record, viewer, request.path_params["job_id"])
        spec = record.spec.model_dump(mode="json", exclude_defaults=True)
        spec.pop("idempotency_key", None)
        spec["metadata"] = {**record.spec.metadata, "resubmitted_from": record.id}
        try:
            handle = await asyncio.to_thread(self.client.submit, spec)
        except JobSpecError as exc:
            raise WebError(400, "resubmit refused: " + "; ".join(f"{f}: {r}" for f, r in exc.errors)) from None
        return RedirectResponse(f"/jobs/{handle.id}", status_code=303)

    def fleet(self, request: Request) -> Response:
        viewer = self.viewer(request)
        if not viewer.operator:
            raise WebError(403, "the fleet page needs the operator's token (CLAUDEQ_WEB_TOKEN)")
        from claudeq.tenants import TenantStore

        from ..top import collect

        snap = collect(self.client)
        tenants, tenants_note = [], None
        try:
            pool = self.settings.accounts.accounts
            slots = sum(a.max_concurrency for a in pool) if self.settings.tenants.reserve_share else None
            store = self.client.store
            tenants = TenantStore(
                store.redis, store.keys, self.settings.tenants, accounts=[a.name for a in pool]
            ).usage(slots=slots)
        except ConfigError as exc:
            tenants_note = f"tenants: {exc}"
        return self.page(
            request,
            "fleet.html",
            snap=snap,
            tenants=tenants,
            tenants_note=tenants_note,
            now=datetime.now(UTC),
            charts=[
                finished_per_minute(*snap.finished_per_minute),
                *fleet_charts(self.client, self.settings, [u.name for u in tenants], snap.at.timestamp()),
            ],
            account_rows=[(a, account_gauges(a)) for a in snap.accounts],
        )


def fleet_charts(client: Client, settings: Settings, tenants: list[str], now: float) -> list[Chart]:
    """The fleet page's pictures of the last hours (producer/web/charts.py)."""
    store = client.store
    charts = [finished_per_hour(store.redis, store.keys, now, settings.result_ttl_s)]
    if settings.tenants.configured and tenants:
        charts.append(spend_per_hour(store.redis, store.keys, now, "tenant", tenants))
    with contextlib.suppress(ConfigError):  # the accounts note on the page says why
        accounts = [a.name for a in settings.accounts.accounts]
        if accounts:
            charts.append(spend_per_hour(store.redis, store.keys, now, "account", accounts))
            charts += [account_history(store.redis, store.keys, now, kind, accounts) for kind in ("signals", "slots")]
    return charts


class Guard:
    """Security headers on every answer and the double-submit cookie when the page made a new token (plain ASGI:
    the live stream passes through unbuffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                made = scope.get("state", {}).get("csrf")
                if made:
                    cookie = f"{CSRF_COOKIE}={made}; Max-Age={SESSION_TTL_S}; Path=/; HttpOnly; SameSite=strict"
                    headers.append("set-cookie", cookie)
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(
    settings: Settings, client: Client | None = None, *, host: str = "127.0.0.1", start_token: str | None = None
) -> Starlette:
    """The ASGI app of `claudeq web` over `settings`' fleet, answering to the names of `host` (the bind address) and
    `settings.web_origin`; with no token configured, `start_token` (or a random one) is the operator's."""
    web = Web(settings, client, start_token)

    async def on_denied(request: Request, exc: Exception) -> Response:
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={_quote(target)}", status_code=303)
        return PlainTextResponse("a token is needed: Authorization: Bearer <token>, or log in at /login", 401)

    async def on_web_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, WebError)
        if "text/html" not in request.headers.get("accept", ""):
            return PlainTextResponse(exc.message, exc.status)
        return web.page(request, "error.html", status=exc.status, message=exc.message)

    async def on_store_error(request: Request, exc: Exception) -> Response:
        message = f"the fleet's Redis did not answer ({exc.__class__.__name__})"
        if isinstance(exc, ClaudeqError):
            message = str(exc)
        return web.page(request, "error.html", status=503, message=message)

    from ..api.app import create_api, mount

    routes = [
        mount(create_api(settings, web.client, web.auth)),
        Route("/", web.index),
        Route("/login", web.login_page, methods=["GET"]),
        Route("/login", web.login, methods=["POST"]),
        Route("/logout", web.logout, methods=["POST"]),
        Route("/jobs", web.jobs),
        Route("/jobs/{job_id}", web.job),
        Route("/jobs/{job_id}/transcript", web.transcript),
        Route("/jobs/{job_id}/artifacts/{name:path}", web.artifact),
        Route("/jobs/{job_id}/events", web.stream),
        Route("/jobs/{job_id}/cancel", web.cancel, methods=["POST"]),
        Route("/jobs/{job_id}/resubmit", web.resubmit, methods=["POST"]),
        Route("/jobs/{job_id}/approve", web.approve, methods=["POST"]),
        Route("/approvals", web.approvals),
        Route("/fleet", web.fleet),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(HostGuard, allowed=HostAllowList(host, settings.web_origin)), Middleware(Guard)],
        exception_handlers={
            NotLoggedIn: on_denied,
            WebError: on_web_error,
            redis.RedisError: on_store_error,
        },
    )
    app.state.web = web
    return app


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")


__all__ = ["create_app"]
