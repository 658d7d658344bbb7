"""What every route of the HTTP API shares (docs/http-api.md): who calls, the fleet it acts on, typed answers.

Callers are the web view's (producer/web/auth.py), by `Authorization: Bearer` only: a tenant's token acts for its
tenant and meets another tenant's job as 404 (as if missing), the operator's acts for all. Bodies are read as JSON
and handed to the client's own validation, so a refusal is the Python client's `JobSpecError`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from claudeq.errors import JobNotFound, JobSpecError, RecordUnreadable
from claudeq.models import JobRecord, JobSpec

from ...config.settings import Settings
from ...config.tenants import DEFAULT_TENANT
from ..client import Client
from ..web.auth import Auth, Viewer
from .limits import SubmitRate
from .models import Problem, Refusal, Submitted

PREFIX = "/api/v1"
ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
SSE = "text/event-stream"
#: The largest request body read (a batch of 1,000 specs with long prompts fits).
MAX_BODY_BYTES = 32 * 2**20

T = TypeVar("T")


class ApiError(Exception):
    """An answer other than the body asked for, with its status and what went wrong."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


def problems(*codes: int, **more: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
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


def body_of(model: type[BaseModel]) -> dict[str, Any]:
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


async def api_of(request: Request) -> Api:
    """The API the request reached (the app's state). Async, as `caller` is: a plain function would cost a thread
    hop per request."""
    api: Api = request.app.state.api
    return api


ApiDep = Annotated[Api, Depends(api_of)]


async def run(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` in a thread: the producer's Redis client blocks."""
    return await asyncio.to_thread(call, *args)


async def json_body(request: Request) -> Any:
    """The request's JSON body; a refusal of field `body` when it is not JSON, or larger than MAX_BODY_BYTES (read
    no further than that: a caller cannot make the server hold more)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise JobSpecError([("body", f"larger than {MAX_BODY_BYTES // 2**20} MiB")])
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise JobSpecError([("body", "not JSON")]) from None


def operator_only(viewer: Viewer) -> None:
    if not viewer.operator:
        raise ApiError(403, "this needs the operator's token (CLAUDEQ_WEB_TOKEN)")
