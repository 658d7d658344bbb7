"""Where each prompt prefix is warm: a job's prefix key, and the per-account record of the prefixes the pass-through
saw cached (docs/architecture.md#cache-affinity).

A job's prefix key is known before it runs: a digest of everything that makes the system part of its requests —
model, tools, MCP tools, base prompt, system prompt and append, the `CLAUDE.md` files of its `cwd`. The pass-through
then files what the run's requests really cached under the account (`record`), and under the key the digest of its
system prefix: a key whose runs send another prefix than expected is corrected by the next run. Only digests are
kept, each until the TTL its breakpoint asked for, at most MAX_PREFIXES per account.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from claudeq.errors import PolicyViolation
from claudeq.keys import Keys, text
from claudeq.models import JobSpec
from claudeq.permissions import allowed_builtin_tools

from ...config.settings import Settings
from ..passthrough.prefixes import Breakpoint, system_prefix

#: Prefix digests kept per account (the newest-expiring ones).
MAX_PREFIXES = 512
#: Files in a job's cwd that the CLI may load into its prompt.
INSTRUCTION_FILES = ("CLAUDE.md", "CLAUDE.local.md", ".claude/CLAUDE.md")
_MAX_INSTRUCTION_BYTES = 1 << 20
#: `json.dumps(parts, sort_keys=True)`, with its encoder made once: dumps builds one per call when given an option.
_dumps_sorted = json.JSONEncoder(sort_keys=True).encode


def _file_digest(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return hashlib.blake2b(handle.read(_MAX_INSTRUCTION_BYTES), digest_size=16).hexdigest()
    except OSError:
        return None


def prefix_key(spec: JobSpec, settings: Settings) -> str:
    """The digest of what makes a job's system prefix (blocking: reads its cwd's CLAUDE.md files)."""
    try:
        tools: list[str] | str = sorted(allowed_builtin_tools(spec, settings.policy))
    except PolicyViolation:
        tools = spec.tools if isinstance(spec.tools, str) else sorted(spec.tools)  # refused later, with the reason
    files: dict[str, str | None] = {}
    if spec.cwd:
        files = {name: _file_digest(Path(spec.cwd) / name) for name in INSTRUCTION_FILES}
    parts: dict[str, Any] = {
        "model": spec.model,
        "tools": tools,
        "mcp_tools": sorted(set(spec.mcp_tools)),
        "base": None if spec.system_prompt is not None else spec.base_prompt or settings.base_prompt,
        "system": spec.system_prompt,
        "append": spec.append_system_prompt,
        "cacheable": settings.cacheable_prompts,
        "output_schema": spec.output_schema,  # the StructuredOutput tool is offered with it
        "files": files,
    }
    return hashlib.blake2b(_dumps_sorted(parts).encode(), digest_size=16).hexdigest()


class CacheStore:
    """The per-account prefix record in Redis (writes from the pass-through's recorder thread, reads on the loop)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def record(self, account: str, key: str | None, found: Sequence[Breakpoint], now: float) -> None:
        """File the prefixes one answered request cached on `account`, and the key's system prefix."""
        slots = self.keys.account_prefixes(account)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(slots, {b.digest: now + b.ttl_s for b in found}, gt=True)
        pipe.zremrangebyscore(slots, "-inf", now)
        pipe.zremrangebyrank(slots, 0, -MAX_PREFIXES - 1)
        pipe.expireat(slots, int(now + max(b.ttl_s for b in found)) + 1, gt=True)
        pipe.expireat(slots, int(now + max(b.ttl_s for b in found)) + 1, nx=True)
        head = system_prefix(list(found))
        if key is not None and head is not None:
            pipe.set(self.keys.prefix_of(key), head.digest, ex=max(1, int(head.ttl_s)))
        pipe.execute()

    def system_prefix_call(self, key: str) -> Any:
        """Queue for `_pipe`: the digest the key's last run cached as its system prefix."""
        return lambda p: p.get(self.keys.prefix_of(key))

    def warm_call(self, digest: str, accounts: Sequence[str]) -> Any:
        """Queue for `_pipe`: when `digest` expires on each of `accounts` (None: not cached there)."""

        def queue(p: Any) -> None:
            for name in accounts:
                p.zscore(self.keys.account_prefixes(name), digest)

        return queue

    @staticmethod
    def warm_until(replies: Sequence[Any], accounts: Sequence[str], now: float) -> dict[str, float]:
        """The accounts whose cache holds the prefix now, with its expiry (epoch s)."""
        pairs = zip(accounts, replies, strict=True)
        return {name: float(at) for name, at in pairs if at is not None and float(at) > now}


def digest_text(reply: Any) -> str | None:
    """A GET reply as a digest, or None."""
    return None if reply is None else text(reply)
