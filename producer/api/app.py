"""The HTTP API `/api/v1/` (docs/http-api.md): submit and follow jobs from any language, described by OpenAPI 3.1.

FastAPI on the Starlette `claudeq web` already runs: it routes, and it writes the OpenAPI document from the same
pydantic models the Python client uses. The routes are in jobs.py and fleet.py, what they share in core.py; here the
app is put together, every error given its typed answer, and the document finished.
"""

from __future__ import annotations

import re
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.routing import Mount

from claudeq.errors import ClaudeqError, JobSpecError
from claudeq.models import JobSpec

from ...config.settings import Settings
from ..client import Client
from ..web.auth import Auth
from . import fleet, jobs
from .core import PREFIX, Api, ApiError
from .limits import OverRate
from .models import BatchIn, Problem, ScheduleIn


def create_api(settings: Settings, client: Client, auth: Auth) -> FastAPI:
    """The `/api/v1` app over `client`'s fleet, for the callers `auth` knows (mounted at PREFIX)."""
    app = FastAPI(
        title="claudeq",
        version="1",
        summary="Submit Claude agent jobs to a claudeq fleet and follow them.",
        docs_url=None,
        redoc_url=None,
        separate_input_output_schemas=False,
    )
    app.state.api = Api(settings, client, auth)
    app.include_router(jobs.router)
    app.include_router(fleet.router)

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
