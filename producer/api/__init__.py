"""The HTTP API `/api/v1/` (docs/http-api.md), served by `claudeq web` and by `claudeq api`. Needs the `web` extra
(fastapi, starlette, uvicorn)."""

from __future__ import annotations

import sys

import fastapi  # noqa: F401  (first: without the `web` extra, the missing module named is this one)
from starlette.applications import Starlette
from starlette.middleware import Middleware

from ...config.settings import Settings
from ..client import Client
from ..web.auth import Auth
from ..web.hosts import HostAllowList, HostGuard
from .app import create_api, mount
from .core import PREFIX


def create_app(
    settings: Settings, client: Client | None = None, *, host: str = "127.0.0.1", start_token: str | None = None
) -> Starlette:
    """The API alone (`claudeq api`): `/api/v1` behind the same host allow-list and tokens as `claudeq web`."""
    client = client or Client(settings)
    auth = Auth(settings, start_token)
    app = Starlette(
        routes=[mount(create_api(settings, client, auth))],
        middleware=[Middleware(HostGuard, allowed=HostAllowList(host, settings.web_origin))],
    )
    app.state.auth = auth
    app.state.client = client
    return app


def serve(host: str, port: int, settings: Settings) -> None:
    """Serve the API on http://host:port/api/v1 until interrupted. Blocks."""
    import uvicorn

    app = create_app(settings, host=host)
    shown = f"[{host}]" if ":" in host else host
    made = app.state.auth.made_token
    if made is None:
        print("claudeq api: every call needs a token (a tenant's mcp_token_env, or CLAUDEQ_WEB_TOKEN)", file=sys.stderr)
    else:  # nothing configured: the server's own operator's token (docs/web.md#who-sees-what)
        print(
            "claudeq api: no token configured (CLAUDEQ_WEB_TOKEN); give this server's own token with every call:"
            f"\n    Authorization: Bearer {made}",
            file=sys.stderr,
        )
    print(f"claudeq api: http://{shown}:{port}{PREFIX}/openapi.json", file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    finally:
        app.state.client.close()


__all__ = ["create_app", "serve"]
