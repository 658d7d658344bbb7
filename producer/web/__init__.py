"""`claudeq web`: the run view in a browser (docs/web.md) and the HTTP API (docs/http-api.md). Needs the `web`
extra (jinja2, fastapi, starlette, uvicorn)."""

from __future__ import annotations

import sys

# First: without the `web` extra, the missing module named is one of these (the pages' and the HTTP API's).
import fastapi  # noqa: F401
import jinja2  # noqa: F401

from ...config.settings import Settings
from .app import create_app


def serve(host: str, port: int, settings: Settings) -> None:
    """Serve the run view on http://host:port until interrupted. Blocks."""
    import uvicorn

    app = create_app(settings, host=host)
    shown = f"[{host}]" if ":" in host else host
    made = app.state.web.auth.made_token
    if made is None:
        print("claudeq web: every page needs a token (a tenant's mcp_token_env, or CLAUDEQ_WEB_TOKEN)", file=sys.stderr)
    else:  # nothing configured: the server's own token, as Jupyter prints one (docs/web.md#who-sees-what)
        print(
            "claudeq web: no token configured (CLAUDEQ_WEB_TOKEN); open this address to log in with this server's own "
            f"token, or give it as Authorization: Bearer:\n    http://{shown}:{port}/?token={made}",
            file=sys.stderr,
        )
    print(f"claudeq web: http://{shown}:{port}/", file=sys.stderr, flush=True)
    try:
        # Open live streams are closed after 2 s on Ctrl-C rather than waited for (a running job's may last hours).
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    finally:
        app.state.web.client.close()


__all__ = ["create_app", "serve"]
