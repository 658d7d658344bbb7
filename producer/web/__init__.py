"""`claudeq web`: the run view in a browser (docs/web.md). Needs the `web` extra (jinja2, starlette, uvicorn)."""

from __future__ import annotations

import sys

import jinja2  # noqa: F401  (first: without the `web` extra, the missing module named is this one)

from claudeq.config.settings import Settings
from claudeq.producer.web.app import create_app

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(host: str, port: int, settings: Settings) -> None:
    """Serve the run view on http://host:port until interrupted. Blocks."""
    import uvicorn

    app = create_app(settings)
    auth = app.state.web.auth
    if auth.required:
        print("claudeq web: every page needs a token (a tenant's mcp_token_env, or CLAUDEQ_WEB_TOKEN)", file=sys.stderr)
    elif host not in LOOPBACK:
        print(
            f"warning: claudeq web on {host} shows every job to anyone who reaches it and lets them cancel and "
            "resubmit (set CLAUDEQ_WEB_TOKEN or tenants' mcp_token_env)",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    print(f"claudeq web: http://{shown}:{port}/", file=sys.stderr, flush=True)
    try:
        # Open live streams are closed after 2 s on Ctrl-C rather than waited for (a running job's may last hours).
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    finally:
        app.state.web.client.close()


__all__ = ["create_app", "serve"]
