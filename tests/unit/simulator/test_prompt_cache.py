"""The simulator caches prompt prefixes as the API does: up to each `cache_control` breakpoint in the API's order
(tools, system blocks, messages), for the TTL the breakpoint asks for, per account (docs/simulator.md#replies)."""

from __future__ import annotations

from typing import Any

import httpx

from claudeq.simulator.usage import PromptCache, Segment
from tests.unit.simulator.conftest import OAUTH, MakeClient, auth, body, parse_sse

ONE_HOUR: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}
FIVE_MIN: dict[str, Any] = {"type": "ephemeral"}


def seg(chars: int, letter: str, ttl: str | None = None) -> Segment:
    return Segment((letter * chars).encode(), ttl)


def test_a_prefix_is_read_up_to_the_breakpoint_and_what_follows_the_last_one_is_plain() -> None:
    cache = PromptCache()
    first = cache.measure([seg(4000, "s", "1h"), seg(400, "a")], now=0)
    assert (first.cache_read_input_tokens, first.cache_creation_input_tokens, first.input_tokens) == (0, 1000, 100)
    assert first.cache_creation_1h_tokens == 1000
    second = cache.measure([seg(4000, "s", "1h"), seg(800, "b")], now=1)
    assert (second.cache_read_input_tokens, second.cache_creation_input_tokens, second.input_tokens) == (1000, 0, 200)


def test_a_change_before_a_breakpoint_is_a_new_prefix_and_the_earlier_breakpoint_still_reads() -> None:
    cache = PromptCache()
    cache.measure([seg(4000, "t", "5m"), seg(4000, "s", "5m")], now=0)
    changed = cache.measure([seg(4000, "t", "5m"), seg(4000, "x", "5m")], now=1)
    assert (changed.cache_read_input_tokens, changed.cache_creation_input_tokens) == (1000, 1000)
    assert changed.cache_creation_1h_tokens == 0


def test_a_prefix_written_at_one_breakpoint_is_found_from_a_later_one() -> None:
    # The CLI moves its message breakpoint to the newest message each turn: the API looks back for the last write.
    cache = PromptCache()
    cache.measure([seg(4000, "s", "1h"), seg(400, "m", "1h")], now=0)
    turn = cache.measure([seg(4000, "s", "1h"), seg(400, "m"), seg(400, "n", "1h")], now=1)
    assert (turn.cache_read_input_tokens, turn.cache_creation_input_tokens) == (1100, 100)


def test_an_entry_lives_for_the_ttl_its_breakpoint_asked_for_refreshed_by_each_read() -> None:
    cache = PromptCache()
    cache.measure([seg(4000, "f", "5m")], now=0)
    cache.measure([seg(4000, "h", "1h")], now=0)
    assert cache.measure([seg(4000, "f", "5m")], now=299).cache_read_input_tokens == 1000  # refreshed to 599
    assert cache.measure([seg(4000, "f", "5m")], now=598).cache_read_input_tokens == 1000
    assert cache.measure([seg(4000, "f", "5m")], now=1000).cache_read_input_tokens == 0
    assert cache.measure([seg(4000, "h", "1h")], now=3599).cache_read_input_tokens == 1000
    assert cache.measure([seg(4000, "h", "1h")], now=3599 + 3601).cache_read_input_tokens == 0


def test_a_settable_ttl_replaces_the_requested_one() -> None:
    cache = PromptCache()
    cache.measure([seg(4000, "h", "1h")], now=0, ttl_s=10)
    assert cache.measure([seg(4000, "h", "1h")], now=11, ttl_s=10).cache_read_input_tokens == 0


def test_without_a_breakpoint_everything_is_plain_input() -> None:
    cache = PromptCache()
    for now in (0, 1):
        usage = cache.measure([seg(4000, "s"), seg(400, "m")], now=now)
        assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1100, 0, 0)


async def usage_of(client: httpx.AsyncClient, request: dict[str, Any], token: str = OAUTH) -> dict[str, Any]:
    response = await client.post("/v1/messages", json=request, headers=auth(token))
    usage: dict[str, Any] = parse_sse(response.text)[0][1]["message"]["usage"]
    return usage


async def test_tools_come_before_the_system_prompt_and_each_account_has_its_own_cache(
    make_client: MakeClient,
) -> None:
    other = "sk-ant-oat01-unit-test-other"
    client = make_client(
        {
            "accounts": [
                {"name": "a", "token": OAUTH, "kind": "oauth"},
                {"name": "b", "token": other, "kind": "oauth"},
            ]
        }
    )
    system = [{"type": "text", "text": "S" * 8000, "cache_control": ONE_HOUR}]
    tool = {"name": "Read", "description": "d" * 400, "input_schema": {"type": "object"}}
    first = await usage_of(client, body("one", system=system, tools=[tool]))
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation"]["ephemeral_1h_input_tokens"] == first["cache_creation_input_tokens"] > 2000
    again = await usage_of(client, body("two", system=system, tools=[tool]))
    assert again["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    # Another tool list changes the prefix before the system prompt: nothing is read.
    other_tool = {**tool, "description": "e" * 400}
    assert (await usage_of(client, body("three", system=system, tools=[other_tool])))["cache_read_input_tokens"] == 0
    # Another account's cache is its own.
    assert (await usage_of(client, body("four", system=system, tools=[tool]), other))["cache_read_input_tokens"] == 0


async def test_the_clis_billing_header_is_no_part_of_the_prefix(client: httpx.AsyncClient) -> None:
    def system(fingerprint: str) -> list[dict[str, Any]]:
        header = f"x-anthropic-billing-header: cc_version=2.1.337.{fingerprint}; cc_entrypoint=sdk-py;"
        return [{"type": "text", "text": header}, {"type": "text", "text": "S" * 8000, "cache_control": ONE_HOUR}]

    first = await usage_of(client, body("review #1", system=system("57f")))
    second = await usage_of(client, body("review #3", system=system("492")))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"] > 2000


def test_a_prefix_shorter_than_the_minimum_is_not_cached_and_a_longer_one_covers_it() -> None:
    # The API caches no prefix shorter than the model's minimum cacheable length: such a breakpoint writes nothing.
    cache = PromptCache()
    short = cache.measure([seg(400, "i", "1h"), seg(400, "m")], now=0, min_tokens=1024)
    assert (short.cache_creation_input_tokens, short.input_tokens) == (0, 200)
    assert cache.measure([seg(400, "i", "1h"), seg(400, "m")], now=1, min_tokens=1024).cache_read_input_tokens == 0
    long = cache.measure([seg(400, "i", "1h"), seg(4000, "s", "1h"), seg(400, "m")], now=2, min_tokens=1024)
    assert (long.cache_creation_input_tokens, long.input_tokens) == (1100, 100)


async def test_a_system_prompt_below_the_minimum_cacheable_length_is_plain_input(make_client: MakeClient) -> None:
    client = make_client({"accounts": [{"name": "a", "token": OAUTH, "kind": "oauth"}]})
    system = [{"type": "text", "text": "S" * 2000, "cache_control": ONE_HOUR}]  # ~500 tokens
    for prompt in ("one", "two"):
        usage = await usage_of(client, body(prompt, system=system))
        assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (0, 0)
        assert usage["input_tokens"] > 500
    # Settable: a simulator standing in for a model with a lower minimum caches it.
    low = make_client({"accounts": [{"name": "a", "token": OAUTH, "kind": "oauth"}], "cache_min_tokens": 256})
    assert (await usage_of(low, body("one", system=system)))["cache_creation_input_tokens"] > 500
