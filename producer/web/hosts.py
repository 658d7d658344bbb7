"""Which names `claudeq web` and `claudeq api` answer to: the host allow-list, enforced before any route.

A page on another site can make a browser reach a loopback server under the attacker's own name (DNS rebinding): the
request then carries `Host` and `Origin` of that name, so a check comparing the two passes. The allow-list is the
bind address (the loopback names for a loopback bind, any IP literal for a wildcard bind — an address is never
rebound) plus the host of `CLAUDEQ_WEB_ORIGIN`; a request naming another host is answered 421 (as `claudeq mcp
--http` does), and one whose `Origin` is a host not on the list 403 (docs/web.md#who-sees-what).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def host_of(authority: str) -> str:
    """The host of a `Host` header or an origin's netloc, lower case, without port, brackets or trailing dot."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    host, colon, port = authority.rpartition(":")
    if colon and port.isdigit() and ":" not in host:
        authority = host
    return authority.rstrip(".")


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostAllowList:
    """The names a server bound to `bind` answers to, with `origin` (CLAUDEQ_WEB_ORIGIN) when configured."""

    def __init__(self, bind: str, origin: str | None = None) -> None:
        bind = host_of(bind)
        self.origin = origin
        self.any_ip = bind in WILDCARDS
        names = set(LOOPBACK_NAMES) if bind in LOOPBACK_NAMES or self.any_ip else {bind}
        if origin is not None:
            names.add(host_of(urlsplit(origin).netloc))
        self.names = frozenset(names)

    def allows(self, host: str) -> bool:
        host = host_of(host)
        return host in self.names or (self.any_ip and is_ip(host))

    def allows_origin(self, origin: str) -> bool:
        """Whether a browser's `Origin` may act here: the configured origin, or an allowed host."""
        if origin == self.origin:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and self.allows(parts.netloc)


class HostGuard:
    """Refuses, before any route, a request whose `Host` is not on the allow-list (421) or whose `Origin` names a
    host that is not (403). Plain ASGI, so a live stream passes through unbuffered."""

    def __init__(self, app: ASGIApp, allowed: HostAllowList) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        answer = None
        if not self.allowed.allows(headers.get("host", "")):
            answer = PlainTextResponse(
                "this server does not answer to that name: reach it at the address it listens on, or set "
                "CLAUDEQ_WEB_ORIGIN to the origin browsers use",
                421,
            )
        else:
            origin = headers.get("origin")
            if origin is not None and origin != "null" and not self.allowed.allows_origin(origin):
                answer = PlainTextResponse("cross-site request refused: Origin is not this server", 403)
        if answer is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # (no route takes one; refused all the same)
            return
        if answer is not None:
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)
