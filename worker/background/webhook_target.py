"""Where a webhook POST goes: the receiver's name resolved once, every address vetted, and the connection made to the
vetted address (the URL's name kept for the Host header and TLS), so a name cannot pass the allow-list and then
resolve to a loopback or private address (DNS rebinding) — docs/notifications.md#webhooks."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Target(NamedTuple):
    """A vetted webhook target: the URL to connect to (the address in place of the name), the Host header, and the
    name TLS verifies the certificate against (None for plain http)."""

    url: str
    host_header: str
    sni_hostname: str | None


class Refused(Exception):
    """The receiver's name resolves to nothing, or to an address webhooks may not reach."""


def address_problem(address: IPAddress, allowed: list[str]) -> str | None:
    """Why a webhook may not connect to `address` (loopback, private, link-local, multicast, reserved,
    unspecified), unless an operator-allowed range (CLAUDEQ_WEBHOOK_ALLOW_NETS) holds it; None when it may."""
    if any(address in ipaddress.ip_network(net, strict=False) for net in allowed):
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    checked = mapped if mapped is not None else address
    for kind in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(checked, f"is_{kind}"):
            return f"resolves to a {kind.replace('_', '-')} address (allow a range with CLAUDEQ_WEBHOOK_ALLOW_NETS)"
    if not checked.is_global:
        return "resolves to an address that is not public (allow a range with CLAUDEQ_WEBHOOK_ALLOW_NETS)"
    return None


async def resolve(url: str, allowed: list[str]) -> Target:
    """Resolve the URL's host once and vet every address it has; -> where to connect. Refused otherwise."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            raise Refused("the receiver's name does not resolve") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    if not addresses:
        raise Refused("the receiver's name does not resolve")
    for address in addresses:
        problem = address_problem(address, allowed)
        if problem:
            raise Refused(problem)
    chosen = addresses[0]
    netloc = f"[{chosen}]:{port}" if chosen.version == 6 else f"{chosen}:{port}"
    host_header = parts.netloc.rpartition("@")[2]
    sni = host if parts.scheme == "https" and literal is None else None
    return Target(urlunsplit(parts._replace(netloc=netloc)), host_header, sni)
