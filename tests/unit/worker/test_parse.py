"""MessageParser: SDK messages (constructed dataclasses) -> claudeq events and RunOutcome."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    RateLimitEvent,
    RateLimitInfo,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from claude_agent_sdk.types import MirrorErrorMessage

from claudeq.worker.run.parse import MessageParser, truncate, usage_from_model_usage
from claudeq.worker.run.prices import cost_usd

SID = "sess-1"
MODEL_USAGE = {
    "claude-sonnet-5-5": {
        "inputTokens": 12,
        "outputTokens": 5,
        "cacheReadInputTokens": 3,
        "cacheCreationInputTokens": 4,
        "costUSD": 0.0001,
    },
    "claude-haiku-5-5": {"inputTokens": 100, "outputTokens": 10, "costUSD": 0.00005},
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def init() -> SystemMessage:
    return SystemMessage(subtype="init", data={"session_id": SID, "model": "claude-sonnet-5-5", "tools": []})


def result(**fields: Any) -> ResultMessage:
    values: dict[str, Any] = {
        "subtype": "success",
        "duration_ms": 120,
        "duration_api_ms": 100,
        "is_error": False,
        "num_turns": 1,
        "session_id": SID,
        "stop_reason": "end_turn",
        "total_cost_usd": 0.00015,
        "result": "hello",
        "model_usage": MODEL_USAGE,
        "terminal_reason": "completed",
    }
    values.update(fields)
    return ResultMessage(**values)


def stream(event: dict[str, Any]) -> StreamEvent:
    return StreamEvent(uuid="u", session_id=SID, event=event)


def feed_all(parser: MessageParser, messages: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for m in messages for e in parser.feed(m)]


def test_success_run_fills_outcome_and_events() -> None:
    parser = MessageParser(attempt=2)
    events = feed_all(
        parser,
        [
            init(),
            AssistantMessage(content=[TextBlock(text="hello")], model="claude-sonnet-5-5", session_id=SID),
            result(),
        ],
    )
    assert [t for t, _ in events] == ["session", "assistant_text", "result"]
    assert events[0][1] == {"session_id": SID}
    assert events[2][1] == {
        "is_error": False,
        "subtype": "success",
        "num_turns": 1,
        "duration_ms": 120,
        "cost_usd": pytest.approx(0.00015),
        "stop_reason": "end_turn",
    }
    out = parser.finish()
    assert out.got_result and not out.is_error
    assert out.session_id == SID
    assert out.result.text == "hello"
    assert out.result.num_turns == 1
    assert out.terminal_reason == "completed"
    usage = out.result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) == (
        112,
        15,
        3,
        4,
    )
    assert usage.cost_usd == pytest.approx(0.00015)
    assert usage.model_usage == MODEL_USAGE


def test_api_error_is_error_with_subtype_success() -> None:
    parser = MessageParser(attempt=1)
    failed = AssistantMessage(
        content=[TextBlock(text="API Error: 529 Overloaded.")], model="<synthetic>", error="server_error"
    )
    feed_all(parser, [init(), failed, result(is_error=True, api_error_status=529, terminal_reason="api_error")])
    out = parser.finish()
    assert out.is_error and out.subtype == "success"
    assert out.api_error_status == 529
    assert out.assistant_error == "server_error"
    assert out.terminal_reason == "api_error"


def test_rejected_rate_limit_becomes_signal_with_aware_resets_at() -> None:
    parser = MessageParser(attempt=1)
    info = RateLimitInfo(status="rejected", resets_at=1795961233, rate_limit_type="five_hour", utilization=1.0)
    events = feed_all(parser, [RateLimitEvent(rate_limit_info=info, uuid="u", session_id=SID)])
    out = parser.finish()
    signal = out.rejected
    assert signal is not None
    assert signal.window == "five_hour"
    assert signal.resets_at == datetime.fromtimestamp(1795961233, UTC)
    assert signal.resets_at.tzinfo is not None
    assert events == [
        (
            "rate_limit",
            {"status": "rejected", "window": "five_hour", "utilization": 1.0, "resets_at": "2026-11-29T14:07:13Z"},
        )
    ]


def test_api_retry_messages_are_counted_and_emitted() -> None:
    parser = MessageParser(attempt=1)
    retry = {"attempt": 1, "max_retries": 2, "retry_delay_ms": 600, "error_status": 529, "error": "overloaded"}
    events = feed_all(parser, [SystemMessage(subtype="api_retry", data=retry)] * 2)
    assert parser.finish().api_retries == 2
    assert events[0] == ("api_retry", {"attempt": 1, "error_status": 529, "error": "overloaded", "delay_ms": 600})


def test_tool_call_and_result_track_tools_in_flight() -> None:
    parser = MessageParser(attempt=1)
    use = AssistantMessage(
        content=[ToolUseBlock(id="toolu_1", name="mcp__claudeq__add", input={"a": 2, "b": 3})], model="m"
    )
    events = feed_all(parser, [use])
    assert parser.tool_in_flight
    assert events == [("tool_call", {"tool": "mcp__claudeq__add", "id": "toolu_1", "input": '{"a": 2, "b": 3}'})]
    done = UserMessage(content=[ToolResultBlock(tool_use_id="toolu_1", content=[{"type": "text", "text": "sum=5"}])])
    events = feed_all(parser, [done])
    assert not parser.tool_in_flight
    assert events == [("tool_result", {"id": "toolu_1", "is_error": False, "text": "sum=5"})]
    assert parser.finish().tool_calls == ["mcp__claudeq__add"]


def test_stream_events_give_liveness_and_usage_of_a_killed_run() -> None:
    clock = Clock()
    parser = MessageParser(attempt=1, clock=clock)
    feed_all(parser, [init()])
    assert parser.outcome.first_byte_at is None
    clock.now = 101.5
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-opus-5-5",
            "usage": {
                "input_tokens": 1000,
                "output_tokens": 1,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 300,
                "cache_creation": {"ephemeral_1h_input_tokens": 100},
            },
        },
    }
    events = feed_all(parser, [stream(start)])
    assert events == []  # partial messages never become events
    assert parser.outcome.first_byte_at == 101.5
    clock.now = 102.0
    feed_all(parser, [stream({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 40}})])
    assert parser.last_progress == 102.0
    out = parser.finish()
    usage = out.result.usage
    assert not out.got_result
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) == (
        1000,
        40,
        200,
        300,
    )
    expected = 1000 * 4e-6 + 40 * 20e-6 + 200 * 0.4e-6 + 200 * 5e-6 + 100 * 8e-6
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.model_usage["claude-opus-5-5"]["inputTokens"] == 1000


def test_an_interrupted_runs_result_keeps_the_cut_off_message_the_stream_showed() -> None:
    # A watchdog interrupted the run mid-answer: the CLI's result counts only the messages it finished, but the
    # service billed the cut-off one's input (its message_start went out). The chaos soak saw the difference.
    parser = MessageParser(attempt=1)
    start = {
        "type": "message_start",
        "message": {"id": "msg_cut", "model": "claude-sonnet-5-5", "usage": {"input_tokens": 257}},
    }
    feed_all(parser, [init(), stream(start)])
    small = {"claude-sonnet-5-5": {"inputTokens": 0, "outputTokens": 0, "costUSD": 0.0}}
    feed_all(parser, [result(is_error=True, subtype="error_during_execution", model_usage=small)])
    assert parser.finish().result.usage.input_tokens == 257
    # A result that counts at least what the stream showed (subagents included) stays as the CLI reported it.
    whole = MessageParser(attempt=1)
    seen = {
        "type": "message_start",
        "message": {"id": "msg_1", "model": "claude-sonnet-5-5", "usage": {"input_tokens": 12}},
    }
    feed_all(whole, [init(), stream(seen), result()])
    assert whole.finish().result.usage.input_tokens == 112


def test_unknown_model_costs_zero_but_counts_tokens() -> None:
    assert cost_usd("claude-mystery-9", input_tokens=10**6) == 0.0
    assert cost_usd("sonnet", input_tokens=12, output_tokens=5) == pytest.approx(0.000074)
    assert cost_usd("claude-3-5-haiku-20241022", input_tokens=10**6, output_tokens=10**6) == pytest.approx(4.8)


def test_mirror_errors_are_counted() -> None:
    parser = MessageParser(attempt=1)
    msg = MirrorErrorMessage(subtype="mirror_error", data={}, error="redis down")
    assert feed_all(parser, [msg]) == [("mirror_error", {"detail": "redis down"})]
    assert parser.finish().mirror_errors == 1


def test_token_in_assistant_text_is_redacted() -> None:
    parser = MessageParser(attempt=1)
    msg = AssistantMessage(content=[TextBlock(text="key sk-ant-oat01-leakedleaked")], model="m")
    [(_, data)] = feed_all(parser, [msg])
    assert "leaked" not in data["text"]


def test_usage_from_model_usage_without_entries_uses_total() -> None:
    assert usage_from_model_usage({}, 0.5).cost_usd == 0.5


def test_truncate_marks_what_was_cut() -> None:
    assert truncate("abcdef", 3) == "abc… [3 more chars]"


def test_structured_output_is_redacted_like_the_text() -> None:
    from claudeq.worker.redaction import remember_secret

    remember_secret("opaque-structured-secret-42")
    parser = MessageParser(attempt=1, clock=Clock())
    parser.feed(init())
    parser.feed(result(structured_output={"notes": ["token opaque-structured-secret-42"], "n": 1}))
    out = parser.finish()
    assert "opaque-structured-secret-42" not in json.dumps(out.result.structured_output)
    assert out.result.structured_output["n"] == 1


def test_assistant_events_carry_the_tokens_the_attempt_used_so_far() -> None:
    """`claudeq top` shows a running job's tokens from these, before the run has a result."""
    parser = MessageParser(attempt=1)
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-sonnet-5-5",
            "usage": {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 20},
        },
    }
    feed_all(
        parser, [init(), stream(start), stream({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 7}})]
    )
    events = feed_all(
        parser,
        [AssistantMessage(content=[TextBlock(text="partial")], model="claude-sonnet-5-5", session_id=SID)],
    )
    assert events == [("assistant_text", {"text": "partial", "tokens_so_far": {"input": 120, "output": 7}})]
    # Without partial messages there is nothing to report: the event stays as it was.
    plain = MessageParser(attempt=1)
    events = feed_all(plain, [AssistantMessage(content=[TextBlock(text="hi")], model="m", session_id=SID)])
    assert events == [("session", {"session_id": SID}), ("assistant_text", {"text": "hi"})]


def test_a_long_tool_result_is_cut_in_its_event_and_says_how_long_it_was() -> None:
    from claudeq.worker.run.parse import TOOL_RESULT_LIMIT

    parser = MessageParser(attempt=1)
    long_text = "line\n" * 1000
    message = UserMessage(content=[ToolResultBlock(tool_use_id="toolu_9", content=long_text, is_error=False)])
    ((kind, data),) = feed_all(parser, [message])
    assert kind == "tool_result"
    assert data["text"].startswith(long_text[:TOOL_RESULT_LIMIT])
    assert len(data["text"]) < TOOL_RESULT_LIMIT + 40
    assert data["chars"] == len(long_text)
