"""Who is looking: the tokens `claudeq web` accepts, its sessions and its guard against cross-site requests.

The MCP server's rule (producer/mcp_server.py): a tenant's `mcp_token_env` token shows that tenant's jobs and no
other's; the operator's token (`CLAUDEQ_WEB_TOKEN`) shows every tenant's and the fleet page. With neither configured
the server makes an operator's token of its own and the command prints it. A token is given once, on
the login form (or as `Authorization: Bearer` by a script); the browser then holds only a random session id in an
HttpOnly, SameSite=Strict cookie. Every POST carries a token of its own that must match a SameSite=Strict cookie
(the double-submit pattern) and, when the browser says where it comes from, the same origin.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from claudeq.models import JobRecord

from ...config.settings import Settings

SESSION_COOKIE = "claudeq_session"
CSRF_COOKIE = "claudeq_csrf"
CSRF_FIELD = "csrf"
#: How long a login lasts without being used (s), and how many sessions are kept at most (oldest dropped).
SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Viewer:
    """The caller: `tenant` None sees every tenant's jobs; `operator` also sees the fleet."""

    tenant: str | None
    operator: bool

    def can_see(self, record: JobRecord) -> bool:
        return self.tenant is None or record.spec.tenant == self.tenant


OPEN = Viewer(tenant=None, operator=True)


class Auth:
    """The tokens of `settings` and the server's sessions (in memory: a restart asks everyone to log in again).

    A token is always needed: with none configured, the server makes an operator's token of its own (`start_token`,
    or a random one) for the command to print, as Jupyter does — loopback is no boundary on a host where agents run
    shell commands."""

    def __init__(self, settings: Settings, start_token: str | None = None) -> None:
        self._tenants = settings.tenants
        self._operator = settings.web_token.get_secret_value() if settings.web_token else None
        #: The token this server made because none was configured (None when one was): printed at start.
        self.made_token: str | None = None
        if not self._operator and not self._tenants.token_mapping:
            self._operator = self.made_token = start_token or secrets.token_urlsafe(32)
        self.required = True
        self._sessions: dict[str, tuple[Viewer, float]] = {}

    def by_token(self, token: str) -> Viewer | None:
        """The viewer a token is (compared in constant time), or None."""
        token = token.strip()
        if not token:
            return None
        if self._operator and hmac.compare_digest(self._operator.encode(), token.encode()):
            return OPEN
        tenant = self._tenants.by_token(token)
        return Viewer(tenant=tenant.name, operator=False) if tenant is not None else None

    def viewer(self, request: Request) -> Viewer | None:
        """The request's viewer: its bearer token's, or its session's."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            return self.by_token(token)
        sid = request.cookies.get(SESSION_COOKIE)
        held = self._sessions.get(sid) if sid else None
        now = time.monotonic()
        if held is None or held[1] < now:
            return None
        self._sessions[sid] = (held[0], now + SESSION_TTL_S)  # type: ignore[index]
        return held[0]

    def login(self, token: str) -> str | None:
        """A new session id for a valid token, else None."""
        viewer = self.by_token(token)
        if viewer is None:
            return None
        if len(self._sessions) >= MAX_SESSIONS:
            now = time.monotonic()
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
            while len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(next(iter(self._sessions)))
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = (viewer, time.monotonic() + SESSION_TTL_S)
        return sid

    def logout(self, request: Request) -> None:
        sid = request.cookies.get(SESSION_COOKIE)
        if sid:
            self._sessions.pop(sid, None)


def csrf_token(request: Request) -> str:
    """The request's double-submit token: its cookie's, or a new one the response sets (see `set_csrf`)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and len(existing) >= 32:
        return existing
    made: str = getattr(request.state, "csrf", "") or secrets.token_urlsafe(32)
    request.state.csrf = made
    return made


def same_site_post(request: Request, form_token: object, web_origin: str | None = None) -> bool:
    """Whether a POST comes from a page of this server: its form token matches the cookie, and its Origin (when
    the browser sends one) is this host or the configured origin (`web_origin`, behind a proxy). A request with a
    bearer token is a script's, not a browser's: no cookie acts for it."""
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return True
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not isinstance(form_token, str) or not hmac.compare_digest(cookie.encode(), form_token.encode()):
        return False
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        return origin == web_origin or urlsplit(origin).netloc == request.headers.get("host", "")
    return origin is None


def safe_next(value: object) -> str:
    """A path on this server to go back to after logging in (never another site)."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/jobs"
