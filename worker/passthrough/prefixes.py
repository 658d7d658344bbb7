"""Which prompt prefixes a request caches: digests of the request up to each `cache_control` breakpoint.

The API caches a request's prefix up to each breakpoint, in its own order — tools, system blocks, then each
message's content blocks — for the TTL the breakpoint asks for (docs/cli-behaviour.md#prompt-caching). The
pass-through computes the same cut over what it forwards, so the fleet learns where each prefix is warm
(docs/architecture.md#cache-affinity). Only digests leave this module: never any content.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

#: The TTLs a breakpoint may ask for (`"ttl": "5m" | "1h"`; 5 minutes when it names none).
TTL_S: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
#: The CLI's first system block: an attribution header whose value fingerprints the prompt. Read as a header by the
#: service, it is no part of a cached prefix (docs/cli-behaviour.md#prompt-caching).
BILLING_HEADER = "x-anthropic-billing-header:"
#: Most breakpoints looked at per request (the API allows 4).
MAX_BREAKPOINTS = 8


@dataclass(frozen=True)
class Breakpoint:
    """A prefix the request asks to cache: its digest, the TTL asked for and whether it ends in the system part
    (tools and system blocks: what jobs with the same options share) or in the messages."""

    digest: str
    ttl_s: float
    in_system: bool


def _ttl(block: Any) -> float | None:
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(control, dict):
        return None
    return TTL_S.get(str(control.get("ttl", "5m")), TTL_S["5m"])


def _billing_header(block: Any) -> bool:
    return isinstance(block, dict) and str(block.get("text", "")).startswith(BILLING_HEADER)


def _canonical(value: Any, role: str | None) -> bytes:
    # The CLI moves its message breakpoint to the newest message each turn: a marker is not part of a prefix.
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return json.dumps([role, value], separators=(",", ":"), sort_keys=True).encode()


def breakpoints(body: bytes) -> list[Breakpoint]:
    """The prefixes a Messages request body caches, shortest first; none for a body that is not such a request."""
    if b'"cache_control"' not in body:
        return []
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    blocks: list[tuple[Any, str | None]] = []  # (block, its message's role; None in the system part)
    tools = data.get("tools")
    blocks += [(t, None) for t in tools] if isinstance(tools, list) else []
    system = data.get("system")
    if isinstance(system, list):
        blocks += [(b, None) for b in system if not _billing_header(b)]
    elif system:
        blocks.append((system, None))
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            content = message.get("content")
            role = str(message.get("role"))
            blocks += [(b, role) for b in (content if isinstance(content, list) else [content])]
    h = hashlib.blake2b(str(data.get("model")).encode(), digest_size=16)
    found: list[Breakpoint] = []
    for block, owner in blocks:
        data_bytes = _canonical(block, owner)
        h.update(len(data_bytes).to_bytes(8, "little"))
        h.update(data_bytes)
        ttl = _ttl(block)
        if ttl is not None and len(found) < MAX_BREAKPOINTS:
            found.append(Breakpoint(h.hexdigest(), ttl, owner is None))
    return found


def system_prefix(found: list[Breakpoint]) -> Breakpoint | None:
    """The longest prefix that ends in the system part: what another job with the same options sends too."""
    return next((b for b in reversed(found) if b.in_system), None)
