"""Token usage: size-based token estimates and a prompt cache that makes repeated prefixes cache reads."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate

# Roughly what the real tokenizer averages on English text and JSON.
CHARS_PER_TOKEN = 4


def estimate_tokens(chars: int) -> int:
    """Tokens for a text of `chars` characters (rounded up)."""
    return -(-chars // CHARS_PER_TOKEN)


@dataclass
class Usage:
    """The four token counts the Messages API reports."""

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    # The cache writes by the TTL their breakpoint asked for (the API's `usage.cache_creation` object).
    cache_creation_1h_tokens: int = field(default=0, compare=False)

    def total(self) -> int:
        """All tokens of all four kinds (what rate-limit windows are charged)."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens + self.output_tokens

    def as_stats(self) -> dict[str, int]:
        """The `tokens` shape of /_sim/stats."""
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cache_read": self.cache_read_input_tokens,
            "cache_creation": self.cache_creation_input_tokens,
        }


#: The TTLs a `cache_control` breakpoint may ask for (`{"type": "ephemeral", "ttl": "5m" | "1h"}`; 5m by default).
TTL_S: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
#: How many blocks before a breakpoint the API looks back for an earlier cached prefix.
LOOKBACK_BLOCKS = 20
#: The shortest prefix the API caches on the Sonnet models (model-dependent; shorter ones are plain input).
MIN_CACHEABLE_TOKENS = 1024


@dataclass(frozen=True)
class Segment:
    """One block of a request in the API's cache order (tools, system blocks, message blocks): its bytes (without
    `cache_control`) and, when a breakpoint follows it, the TTL key it asks for."""

    data: bytes
    breakpoint_ttl: str | None = None


class PromptCache:
    """The prefixes one account has written, cached as the API does: a prefix is written up to each `cache_control`
    breakpoint, and a later request reads the longest written prefix found at one of its breakpoints (or up to
    LOOKBACK_BLOCKS blocks before one). A read refreshes the entry's TTL; blocks after the last breakpoint are plain
    input, and so is a prefix shorter than the minimum cacheable length. Only digests are kept."""

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def clear(self) -> None:
        """Forget every prefix."""
        self._seen.clear()

    def measure(
        self,
        segments: list[Segment],
        now: float,
        ttl_s: float | None = None,
        remember: bool = True,
        min_tokens: int = 0,
    ) -> Usage:
        """Input-side usage of a request made of `segments`; with `remember`, its prefixes up to each breakpoint
        become cached for the TTL the breakpoint asks for (`ttl_s` replaces every TTL: benches shorten them). A
        breakpoint whose prefix is shorter than `min_tokens` caches nothing, as if it were not there."""
        tokens = [estimate_tokens(len(s.data)) for s in segments]
        total = sum(tokens)
        prefix_tokens = list(accumulate(tokens))
        breakpoints = [
            i for i, s in enumerate(segments) if s.breakpoint_ttl is not None and prefix_tokens[i] >= min_tokens
        ]
        if not breakpoints:
            return Usage(input_tokens=total)
        digests = []
        h = hashlib.blake2b(digest_size=16)
        for segment in segments:
            h.update(len(segment.data).to_bytes(8, "little"))
            h.update(segment.data)
            digests.append(h.copy().digest())
        hit = -1  # the index of the last block read from the cache
        for b in reversed(breakpoints):
            for i in range(b, max(-1, b - LOOKBACK_BLOCKS), -1):
                expiry = self._seen.get(digests[i])
                if expiry is not None and expiry > now:
                    hit = i
                    break
            if hit >= 0:
                break
        last = breakpoints[-1]
        read = sum(tokens[: hit + 1])
        written = sum(tokens[hit + 1 : last + 1])
        written_1h = 0
        start = hit + 1
        for b in breakpoints:
            if b >= start:
                if segments[b].breakpoint_ttl == "1h":
                    written_1h += sum(tokens[start : b + 1])
                start = b + 1
        if remember:
            if hit >= 0:
                ttl = segments[next(b for b in breakpoints if b >= hit)].breakpoint_ttl or "5m"
                self._keep(digests[hit], now + (ttl_s if ttl_s is not None else TTL_S.get(ttl, TTL_S["5m"])))
            for b in breakpoints:
                if b > hit:
                    ttl = segments[b].breakpoint_ttl or "5m"
                    self._keep(digests[b], now + (ttl_s if ttl_s is not None else TTL_S.get(ttl, TTL_S["5m"])))
        return Usage(
            input_tokens=total - read - written,
            cache_creation_input_tokens=written,
            cache_read_input_tokens=read,
            cache_creation_1h_tokens=written_1h,
        )

    def _keep(self, digest: bytes, expiry: float) -> None:
        self._seen[digest] = max(expiry, self._seen.get(digest, 0.0))
        self._seen.move_to_end(digest)
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
