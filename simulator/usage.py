"""Token usage: size-based token estimates and a prompt cache that makes repeated prefixes cache reads."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

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


class PromptCache:
    """Prefixes an account has sent with `cache_control`, kept like the real cache (TTL refreshed on a hit).

    A request is cut into pieces (model + system + tools, then each message). The longest prefix already seen is
    a cache read; the rest up to the last message is a cache write; the last message is plain input, as with
    the CLI, which puts its last cache breakpoint just before the newest content.
    """

    def __init__(self, ttl_s: float = 300.0, max_entries: int = 4096):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def clear(self) -> None:
        """Forget every prefix."""
        self._seen.clear()

    def measure(self, pieces: list[bytes], cacheable: bool, now: float, remember: bool = True) -> Usage:
        """Input-side usage of a request made of `pieces`; with `remember`, its prefixes become cached."""
        tokens = [estimate_tokens(len(p)) for p in pieces]
        total = sum(tokens)
        if not cacheable or not pieces:
            return Usage(input_tokens=total)
        digests = []
        h = hashlib.blake2b(digest_size=16)
        for piece in pieces:
            h.update(len(piece).to_bytes(8, "little"))
            h.update(piece)
            digests.append(h.copy().digest())
        read = 0
        for i in range(len(digests) - 1, -1, -1):
            expiry = self._seen.get(digests[i])
            if expiry is not None and expiry > now:
                read = sum(tokens[: i + 1])
                break
        plain = min(tokens[-1], total - read)
        if remember:
            for d in digests:
                self._seen[d] = now + self.ttl_s
                self._seen.move_to_end(d)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
        return Usage(input_tokens=plain, cache_creation_input_tokens=total - read - plain, cache_read_input_tokens=read)
