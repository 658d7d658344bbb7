"""Hostile input to the SDK-message → event parser (worker/run/parse.py): whatever the CLI prints — random, truncated,
wrong-typed — `MessageParser.feed` and `finish` never raise, and every event they make serialises (it is stored).

Two layers, as in a run: raw CLI JSON goes through the SDK's own `parse_message` (which may refuse it: the runner
records that as the run's exception), and what the SDK accepts goes through the parser; and SDK message objects
built directly with values of any JSON type in every field (the SDK does not check types)."""

from __future__ import annotations

import json
from typing import Any

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
from claude_agent_sdk._internal.message_parser import parse_message
from claude_agent_sdk.types import MirrorErrorMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claudeq.worker.run.parse import MessageParser

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=30)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)

#: Field names the CLI's messages use, so random dicts often look almost right.
FIELDS = [
    "type",
    "subtype",
    "message",
    "content",
    "model",
    "id",
    "name",
    "input",
    "text",
    "tool_use_id",
    "is_error",
    "session_id",
    "uuid",
    "event",
    "usage",
    "model_usage",
    "result",
    "total_cost_usd",
    "duration_ms",
    "duration_api_ms",
    "num_turns",
    "stop_reason",
    "rate_limit_info",
    "status",
    "resets_at",
    "utilization",
    "rateLimitType",
    "error",
    "errors",
    "api_error_status",
    "structured_output",
    "data",
    "cache_creation",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "inputTokens",
    "outputTokens",
    "costUSD",
    "parent_tool_use_id",
    "terminal_reason",
]
TYPES = ["system", "assistant", "user", "result", "stream_event", "rate_limit_event", "control_request", "x"]


@st.composite
def cli_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object shaped like a CLI stream-json line, often close to a valid one, often broken."""
    data: dict[str, Any] = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=8))
    if draw(st.booleans()):
        data["type"] = draw(st.sampled_from(TYPES))
    if data.get("type") in ("assistant", "user") and draw(st.booleans()):
        blocks = st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"])},
                optional={k: json_values for k in ("text", "id", "name", "input", "tool_use_id", "content")},
            ),
            max_size=3,
        )
        data["message"] = {"content": draw(blocks), "model": draw(json_values), "usage": draw(json_values)}
    if data.get("type") == "stream_event":
        data.setdefault("uuid", "u")
        data.setdefault("session_id", "s")
        data["event"] = draw(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["message_start", "message_delta", "content_block_delta", "?"])},
                optional={"message": json_values, "usage": json_values, "delta": json_values},
            )
        )
    return data


def truncated(data: dict[str, Any], keep: int) -> dict[str, Any]:
    """`data` with only its first `keep` keys (a line cut short, then repaired into an object)."""
    return dict(list(data.items())[:keep])


def feed_all(messages: list[Any]) -> None:
    parser = MessageParser(attempt=1)
    for message in messages:
        for event in parser.feed(message):
            json.dumps(event.model_dump(mode="json"))
    outcome = parser.finish()
    json.dumps(outcome.result.usage.model_dump(mode="json"))


@SETTINGS
@given(st.lists(cli_dicts(), min_size=1, max_size=6), st.integers(0, 8))
def test_random_and_truncated_cli_lines_never_crash_the_parser(lines: list[dict[str, Any]], keep: int) -> None:
    messages = []
    for data in [*lines, truncated(lines[0], keep)]:
        try:
            message = parse_message(data)
        except Exception:
            continue  # the SDK refused the line: the runner records its exception, the parser never sees it
        if message is not None:
            messages.append(message)
    feed_all(messages)


any_text = st.text(max_size=40)
anything = json_values


@st.composite
def sdk_messages(draw: st.DrawFn) -> Any:
    """SDK message objects with values of any JSON type in their fields."""
    blocks = st.lists(
        st.one_of(
            st.builds(TextBlock, text=anything),
            st.builds(ToolUseBlock, id=anything, name=anything, input=anything),
            st.builds(ToolResultBlock, tool_use_id=anything, content=anything, is_error=anything),
        ),
        max_size=3,
    )
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return AssistantMessage(
            content=draw(blocks), model=draw(anything), error=draw(anything), session_id=draw(anything)
        )
    if kind == 1:
        return UserMessage(content=draw(st.one_of(any_text, blocks)))
    if kind == 2:
        return ResultMessage(
            subtype=draw(anything),
            duration_ms=draw(anything),
            duration_api_ms=draw(anything),
            is_error=draw(anything),
            num_turns=draw(anything),
            session_id=draw(anything),
            stop_reason=draw(anything),
            total_cost_usd=draw(anything),
            usage=draw(anything),
            result=draw(st.one_of(st.none(), any_text)),
            structured_output=draw(anything),
            model_usage=draw(st.one_of(st.none(), st.dictionaries(any_text, anything, max_size=3))),
            errors=draw(st.one_of(st.none(), st.lists(any_text, max_size=3))),
            api_error_status=draw(anything),
        )
    if kind == 3:
        info = RateLimitInfo(
            status=draw(anything),
            resets_at=draw(anything),
            rate_limit_type=draw(anything),
            utilization=draw(anything),
        )
        return RateLimitEvent(rate_limit_info=info, uuid="u", session_id="s")
    if kind == 4:
        event = draw(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["message_start", "message_delta", "?"])},
                optional={"message": anything, "usage": anything},
            )
        )
        return StreamEvent(uuid="u", session_id="s", event=event)
    if kind == 5:
        return SystemMessage(
            subtype=draw(st.sampled_from(["init", "api_retry", "?"])),
            data=draw(st.dictionaries(st.sampled_from(FIELDS), anything)),
        )
    return MirrorErrorMessage(subtype="mirror_error", data={}, key=None, error=draw(any_text))


@SETTINGS
@given(st.lists(sdk_messages(), min_size=1, max_size=8))
def test_sdk_messages_with_any_field_types_never_crash_the_parser(messages: list[Any]) -> None:
    feed_all(messages)
