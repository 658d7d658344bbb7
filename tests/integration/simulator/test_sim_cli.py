"""Acceptance: the real bundled CLI, driven through claude-agent-sdk, runs against the simulator offline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from claude_agent_sdk import (
    AssistantMessage,
    RateLimitEvent,
    ResultMessage,
    StreamEvent,
    TextBlock,
    create_sdk_mcp_server,
    tool,
)

from claudeq.simulator.testing import SimulatorServer
from tests.integration.simulator.conftest import API_KEY, OAUTH, options, run_cli

pytestmark = pytest.mark.integration


def _usage_of(result: ResultMessage) -> dict[str, int]:
    usage = result.usage or {}
    return {
        "input": usage["input_tokens"],
        "output": usage["output_tokens"],
        "cache_read": usage["cache_read_input_tokens"],
        "cache_creation": usage["cache_creation_input_tokens"],
    }


async def test_oauth_run_succeeds_with_usage_cost_and_matching_stats(sim: SimulatorServer, home: Path) -> None:
    run = await run_cli("Summarise the plot of Hamlet", options(sim.base_url, home))
    result = run.result
    assert result.is_error is False and run.error is None
    assert result.session_id
    assert "Summarise the plot of Hamlet" in (result.result or "")
    # The CLI puts a breakpoint on its newest message, but on the minimal prompt without tools the whole request is
    # shorter than the minimum cacheable length: plain input, as the API bills it.
    assert result.usage and result.usage["output_tokens"] > 0
    assert result.usage["cache_creation_input_tokens"] == 0 and result.usage["input_tokens"] > 0
    assert result.total_cost_usd and result.total_cost_usd > 0
    assert result.model_usage and result.model_usage["claude-sonnet-5-5"]["costUSD"] == pytest.approx(
        result.total_cost_usd
    )
    stats = sim.stats()
    session = stats["sessions"][result.session_id]
    assert session["requests"] == 1
    # The simulator billed exactly what the CLI counted.
    assert session["tokens"] == _usage_of(result)
    (log,) = sim.requests()
    assert log["session_id"] == result.session_id
    assert log["tool_names"] == []  # tools=[]: no built-in tools offered
    assert sum(m["text"].count("Summarise the plot of Hamlet") for m in log["messages"]) == 1


async def test_rejected_and_warning_rate_limit_events(home: Path) -> None:
    config = {
        "accounts": [
            {
                "name": "spent",
                "token": "tok-spent",
                "windows": [{"family": "5h", "length_s": 90, "requests": 3, "used_requests": 3}],
            },
            {
                "name": "busy",
                "token": "tok-busy",
                "windows": [{"family": "7d", "length_s": 600, "requests": 10, "used_requests": 8, "warn_at": 0.8}],
            },
        ]
    }
    with SimulatorServer(config) as sim:
        rejected = await run_cli("hello there", options(sim.base_url, home, "tok-spent"))
        warned = await run_cli("hello again", options(sim.base_url, home, "tok-busy"))
        stats = sim.stats()["accounts"]
    assert rejected.result.is_error and rejected.result.api_error_status == 429
    (event,) = rejected.of_type(RateLimitEvent)
    assert event.rate_limit_info.status == "rejected"
    assert event.rate_limit_info.rate_limit_type == "five_hour"
    assert abs(event.rate_limit_info.resets_at - stats["spent"]["windows"][0]["resets_at"]) <= 1
    assert stats["spent"]["rejected"] == 1

    assert warned.result.is_error is False
    (event,) = warned.of_type(RateLimitEvent)
    info = event.rate_limit_info
    assert (info.status, info.rate_limit_type, info.utilization) == ("allowed_warning", "seven_day", 0.9)
    assert abs(info.resets_at - stats["busy"]["windows"][0]["resets_at"]) <= 1


async def test_api_key_account_past_its_limit_gets_plain_429(home: Path) -> None:
    config = {
        "accounts": [{"name": "k", "token": API_KEY, "kind": "api_key", "windows": [{"length_s": 60, "requests": 0}]}]
    }
    with SimulatorServer(config) as sim:
        run = await run_cli("hello", options(sim.base_url, home, API_KEY, "api_key"))
    assert run.result.is_error and run.result.api_error_status == 429
    assert run.of_type(RateLimitEvent) == []  # API-key accounts never get rate-limit events


async def test_tool_directive_calls_an_in_process_sdk_mcp_tool(sim: SimulatorServer, home: Path, nonce: str) -> None:
    calls: list[dict[str, Any]] = []

    @tool("add", "Add two numbers", {"a": int, "b": int})
    async def add(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"content": [{"type": "text", "text": f"sum={args['a'] + args['b']}"}]}

    server = create_sdk_mcp_server(name="calc", tools=[add])
    prompt = f'{nonce} add these [[sim: tool mcp__calc__add {{"a": 2, "b": 3}}]]'
    opts = options(sim.base_url, home, mcp_servers={"calc": server}, allowed_tools=["mcp__calc__add"])
    run = await run_cli(prompt, opts)
    assert calls == [{"a": 2, "b": 3}]  # ran here, in the test process
    assert run.result.is_error is False
    assert "sum=5" in (run.result.result or "")
    assert run.result.num_turns == 2
    session = sim.stats()["sessions"][run.result.session_id]
    assert session["requests"] == 2
    assert session["tokens"] == _usage_of(run.result)


async def test_error_529_without_retries(sim: SimulatorServer, home: Path, nonce: str) -> None:
    run = await run_cli(f"{nonce} [[sim: error 529]]", options(sim.base_url, home))
    assert run.result.is_error and run.result.api_error_status == 529
    assert run.error is not None
    assert sim.stats()["totals"]["errors_injected"] == 1


async def test_error_times_lets_the_cli_retry_succeed(sim: SimulatorServer, home: Path, nonce: str) -> None:
    opts = options(sim.base_url, home, env={"CLAUDE_CODE_MAX_RETRIES": "1"})
    run = await run_cli(f"{nonce} [[sim: error 500 times=1]]", opts)
    assert run.result.is_error is False
    statuses = [entry["status"] for entry in sim.requests()]
    assert statuses == [500, 200]


async def test_unknown_token_is_authentication_failed(home: Path) -> None:
    with SimulatorServer({"accounts": [{"name": "known", "token": "tok-known"}]}) as sim:
        run = await run_cli("hello", options(sim.base_url, home, OAUTH))
        stats = sim.stats()
    assert run.result.is_error
    errors = [m.error for m in run.of_type(AssistantMessage)]
    assert errors == ["authentication_failed"]
    assert stats["totals"]["unknown_token"] >= 1 and stats["accounts"] == {}


async def test_stall_holds_the_result_until_it_ends(sim: SimulatorServer, home: Path, nonce: str) -> None:
    started = time.monotonic()
    run = await run_cli(f"{nonce} [[sim: stall 3]]", options(sim.base_url, home, include_partial_messages=True))
    starts = [
        t
        for m, t in zip(run.messages, run.times, strict=True)
        if isinstance(m, StreamEvent) and m.event.get("type") == "message_start"
    ]
    result_at = run.times[run.messages.index(run.result)]
    assert starts, "the SDK saw message_start before the stall"
    assert result_at - starts[0] >= 2.9
    assert result_at - started >= 3
    assert run.result.is_error is False
    assert sim.stats()["totals"]["stalls_injected"] == 1


async def test_structured_output_validates_against_the_schema(sim: SimulatorServer, home: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 3},
            "priority": {"enum": ["low", "high"]},
            "steps": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "estimate_h": {"type": "number", "minimum": 0.5},
        },
        "required": ["title", "priority", "steps", "estimate_h"],
        "additionalProperties": False,
    }
    opts = options(sim.base_url, home, output_format={"type": "json_schema", "schema": schema})
    run = await run_cli("Plan the migration", opts)
    assert run.result.is_error is False
    jsonschema.validate(run.result.structured_output, schema)
    (entry,) = sim.requests()
    assert "StructuredOutput" in entry["tool_names"]


async def test_dropped_stream_is_a_failed_run(sim: SimulatorServer, home: Path, nonce: str) -> None:
    run = await run_cli(f"{nonce} [[sim: drop]] [[sim: tokens out=300]]", options(sim.base_url, home))
    assert run.result.is_error
    assert sim.stats()["totals"]["drops_injected"] >= 1


async def test_resumed_turn_uses_its_own_directive(sim: SimulatorServer, home: Path, nonce: str) -> None:
    first = await run_cli(f'{nonce} first [[sim: text "ONE"]]', options(sim.base_url, home))
    second = await run_cli(
        f'{nonce} second [[sim: text "TWO"]]', options(sim.base_url, home, resume=first.result.session_id)
    )
    texts = [b.text for m in second.of_type(AssistantMessage) for b in m.content if isinstance(b, TextBlock)]
    assert texts == ["TWO"]
    assert second.result.session_id == first.result.session_id
    last = sim.requests()[-1]
    # Turn 2's request carried turn 1's messages.
    assert any("first" in m["text"] for m in last["messages"]) and any("ONE" in m["text"] for m in last["messages"])
    assert sim.stats()["sessions"][first.result.session_id]["requests"] == 2
