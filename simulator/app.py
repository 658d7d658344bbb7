"""The Starlette application: the Messages API routes plus the `/_sim/*` control routes."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import SimConfig, redacted
from .errors import ApiError, new_request_id
from .service import Simulator


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    request_id = new_request_id()
    return Response(
        ApiError(status, message).body(request_id),
        status_code=status,
        media_type="application/json",
        headers={**(headers or {}), "request-id": request_id},
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(404, f"Not found: {request.method} {request.url.path}")


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    return _error(405, f"Method not allowed: {request.method} {request.url.path}", headers)


def _validation_message(err: ValidationError) -> str:
    # Without the input values: they could be tokens.
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in err.errors(include_input=False)
    )


class _QuietDroppedStreams(logging.Filter):
    """Hide uvicorn's complaint about the responses the simulator cuts off on purpose (`drop`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def quiet_dropped_streams() -> None:
    """Install the filter above on uvicorn's error logger (idempotent)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDroppedStreams) for f in logger.filters):
        logger.addFilter(_QuietDroppedStreams())


class _WireLog:
    """Logs every request outside /_sim/ as it arrived, before routing (`Simulator.record_wire`): a path no route
    answers is in the wire log too."""

    def __init__(self, app: ASGIApp, simulator: Simulator) -> None:
        self.app = app
        self.simulator = simulator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("path", "").startswith("/_sim/"):
            self.simulator.record_wire(scope)
        await self.app(scope, receive, send)


def create_app(simulator: Simulator | SimConfig | dict[str, Any] | None = None) -> Starlette:
    """The ASGI app of a simulator (a new one built from a config if not given)."""
    sim = simulator if isinstance(simulator, Simulator) else Simulator(simulator)

    async def hello(request: Request) -> Response:
        # The CLI's preconnect warm-up (HEAD /api/hello).
        return Response(status_code=200)

    async def stats(request: Request) -> Response:
        return JSONResponse(sim.snapshot())

    async def requests(request: Request) -> Response:
        raw = request.query_params.get("limit")
        if raw is not None and not (raw.isascii() and raw.isdigit()):
            return _error(400, "limit: Input should be a non-negative integer")
        return JSONResponse(sim.stats.requests(int(raw) if raw else None))

    async def wire(request: Request) -> Response:
        raw = request.query_params.get("limit")
        if raw is not None and not (raw.isascii() and raw.isdigit()):
            return _error(400, "limit: Input should be a non-negative integer")
        return JSONResponse(sim.stats.wire_requests(int(raw) if raw else None))

    async def reset(request: Request) -> Response:
        sim.reset()
        return JSONResponse({"ok": True})

    async def config(request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse(redacted(sim.config))
        try:
            changes = await request.json()
        except (ValueError, RecursionError):
            return _error(400, "config: the body must be a JSON object")
        if not isinstance(changes, dict):
            return _error(400, "config: the body must be a JSON object")
        try:
            new = sim.reconfigure(changes)
        except ValidationError as e:
            return _error(400, _validation_message(e))
        except RecursionError:
            return _error(400, "config: nested too deeply")
        return JSONResponse(redacted(new))

    app = Starlette(
        routes=[
            Route("/v1/messages", sim, methods=["POST"]),
            Route("/api/hello", hello, methods=["GET", "HEAD"]),
            Route("/_sim/stats", stats, methods=["GET"]),
            Route("/_sim/requests", requests, methods=["GET"]),
            Route("/_sim/wire", wire, methods=["GET"]),
            Route("/_sim/reset", reset, methods=["POST"]),
            Route("/_sim/config", config, methods=["GET", "POST"]),
        ],
        exception_handlers={404: _not_found, 405: _method_not_allowed},
        middleware=[Middleware(_WireLog, simulator=sim)],
    )
    app.state.simulator = sim
    return app
