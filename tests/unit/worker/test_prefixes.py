"""What the pass-through learns from a request: the digests of its prefixes up to each breakpoint, and their filing
per account — bounded, expiring with the TTL asked for, no content (docs/architecture.md#cache-affinity)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import fakeredis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobSpec
from claudeq.worker.accounts.cache_affinity import MAX_PREFIXES, CacheStore, prefix_key
from claudeq.worker.passthrough.prefixes import Breakpoint, breakpoints, system_prefix

HOUR: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}


def request(append: str, prompt: str, tools: list[dict[str, Any]] | None = None, fingerprint: str = "57f") -> bytes:
    """A request shaped like the CLI's: billing header, identity, instructions, the prompt, the environment."""
    body = {
        "model": "claude-sonnet-5-5",
        "tools": tools or [],
        "system": [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.337.{fingerprint};"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": HOUR},
            {"type": "text", "text": "Instructions.\n\n" + append, "cache_control": HOUR},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": prompt}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": HOUR}]},
        ],
    }
    return json.dumps(body).encode()


def test_each_breakpoint_is_a_digest_with_its_ttl_and_where_it_ends() -> None:
    found = breakpoints(request("Team rules.", "review #1"))
    assert [(b.ttl_s, b.in_system) for b in found] == [(3600, True), (3600, True), (3600, False)]
    assert all(len(b.digest) == 32 for b in found)


def test_jobs_of_one_family_share_the_system_prefix_and_not_the_rest() -> None:
    one, two = breakpoints(request("Team rules.", "review #1")), breakpoints(request("Team rules.", "review #2"))
    other = breakpoints(request("Other rules.", "review #1"))
    assert system_prefix(one) == system_prefix(two) != system_prefix(other)
    # The billing header fingerprints each prompt: it is a header, not part of the prefix.
    assert system_prefix(breakpoints(request("Team rules.", "review #3", fingerprint="492"))) == system_prefix(one)
    assert one[-1] != two[-1]
    assert one[0] == other[0]  # the identity is shared by every family
    # Another tool list comes before the system prompt: nothing is shared.
    tooled = breakpoints(request("Team rules.", "review #1", tools=[{"name": "Read", "input_schema": {}}]))
    assert tooled[0] != one[0]


def test_a_request_without_breakpoints_or_not_json_caches_nothing() -> None:
    assert breakpoints(json.dumps({"model": "m", "messages": [], "system": "s"}).encode()) == []
    assert breakpoints(b'{"cache_control": ') == []


def test_the_account_record_expires_with_the_ttl_and_stays_bounded() -> None:
    client = fakeredis.FakeRedis()
    keys = Keys("cqt-prefixes:")
    store = CacheStore(client, keys)
    found = breakpoints(request("Team rules.", "review #1"))
    now = time.time()
    store.record("a", "key-1", found, now=now)
    filed = dict(client.zrange(keys.account_prefixes("a"), 0, -1, withscores=True))
    assert filed == {b.digest.encode(): now + 3600 for b in found}
    assert 3500 < client.ttl(keys.account_prefixes("a")) <= 3602
    head = system_prefix(found)
    assert head is not None and client.get(keys.prefix_of("key-1")) == head.digest.encode()
    assert 0 < client.ttl(keys.prefix_of("key-1")) <= 3600
    # Entries past their expiry go at the next write; at most MAX_PREFIXES stay, the longest-lived ones.
    many = [Breakpoint(f"{i:032x}", 300.0, False) for i in range(MAX_PREFIXES + 10)]
    store.record("a", None, many, now=now + 3601)
    left = client.zrange(keys.account_prefixes("a"), 0, -1)
    assert len(left) == MAX_PREFIXES and not {b.digest.encode() for b in found} & set(left)


def test_the_prefix_key_covers_what_makes_the_system_prefix(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, policy={"workspace_roots": [str(tmp_path)]})  # type: ignore[call-arg]
    base = JobSpec(prompt="review #1", append_system_prompt="Team rules.", cwd=str(tmp_path))
    key = prefix_key(base, settings)
    assert prefix_key(base.model_copy(update={"prompt": "review #2"}), settings) == key
    for change in ({"append_system_prompt": "Other."}, {"model": "opus"}, {"tools": "read-only"}):
        assert prefix_key(base.model_copy(update=change), settings) != key, change
    assert prefix_key(base, settings.model_copy(update={"cacheable_prompts": False})) != key
    (tmp_path / "CLAUDE.md").write_text("Use tabs.")
    assert prefix_key(base, settings) != key
