"""The one place SDK messages are looked at: `MessageParser` turns them into claudeq events and a `RunOutcome`.

Partial `StreamEvent`s feed liveness marks (first byte, last progress) and the usage of a run killed before its
result; they never become events themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    RateLimitEvent,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from claude_agent_sdk.types import MirrorErrorMessage

from claudeq.events import (
    ApiRetry,
    AssistantText,
    EventData,
    MirrorError,
    RateLimited,
    ResultReceived,
    SessionStarted,
    TokensSoFar,
    ToolCalled,
    ToolResult,
)
from claudeq.models import Event, Usage

from ..redaction import redact
from .outcome import RateLimitSignal, RunOutcome
from .prices import cost_usd

#: Longest text kept in one event's field (tool inputs, assistant text).
TEXT_LIMIT = 4000
#: Longest tool result text kept in a `tool_result` event by default (`CLAUDEQ_EVENT_TOOL_RESULT_CHARS`): what a
#: person reads of it (the head of a file, the first lines of a command's output); the whole result is in the
#: session's transcript, and `chars` says how long it was (docs/architecture.md#what-a-job-keeps-in-redis).
TOOL_RESULT_LIMIT = 1000


def truncate(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text` cut to `limit` characters, with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more chars]"


def _json_text(value: Any, limit: int = TEXT_LIMIT) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return truncate(redact(text), limit)


def _result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _text(content)
    parts = [
        _text(c.get("text", "")) if c.get("type") == "text" else f"[{_text(c.get('type', '?'))}]"
        for c in (item if isinstance(item, dict) else {"type": "text", "text": item} for item in content)
    ]
    return "\n".join(parts)


# The SDK builds its messages from the CLI's JSON without checking types: a field may hold any JSON value. The
# helpers below read a field as the type the parser needs, so a malformed message never ends a run by itself.


def _text(value: Any) -> str:
    """A text field as text (another JSON value as its JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _opt_text(value: Any) -> str | None:
    """An optional text field: None stays None."""
    return None if value is None else _text(value)


def _opt_int(value: Any) -> int | None:
    """An optional integer field: anything but a finite number is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return int(value)
    except (OverflowError, ValueError):
        return None


def _number(value: Any) -> float | None:
    """An optional number field: anything but a number is None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    """An object field: anything but an object is empty."""
    return value if isinstance(value, dict) else {}


def _epoch(value: int | float | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


@dataclass
class _StreamUsage:
    """Usage of one API message as its stream events showed it."""

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0


def _int(value: Any) -> int:
    return _opt_int(value) or 0


@dataclass
class MessageParser:
    """Fed each SDK message of one attempt; returns the events to emit and fills `outcome`."""

    attempt: int
    clock: Callable[[], float] = time.monotonic
    tool_result_limit: int = TOOL_RESULT_LIMIT  # the worker's `event_tool_result_chars`
    outcome: RunOutcome = field(default_factory=RunOutcome)
    model: str | None = None  # from the init message
    last_progress: float | None = None  # monotonic time of the last message of any kind
    tools_in_flight: dict[str, str] = field(default_factory=dict)  # tool_use id -> tool name, awaiting its result
    _stream_usage: dict[str, _StreamUsage] = field(default_factory=dict)
    _anon: int = 0
    _current: str = ""  # id of the API message being streamed

    @property
    def tool_in_flight(self) -> bool:
        """Whether a tool call is running (a tool_use without its tool_result yet): idle time does not count."""
        return bool(self.tools_in_flight)

    def feed(self, message: object) -> list[Event]:
        """Take one SDK message; return the claudeq events it means (possibly none)."""
        return [data.event(self.attempt) for data in self._feed(message)]

    def _feed(self, message: object) -> Sequence[EventData]:
        now = self.clock()
        self.last_progress = now
        if isinstance(message, StreamEvent):
            self._stream(message, now)
            return []
        if isinstance(message, AssistantMessage):
            self._first_byte(now)
            return self._assistant(message)
        if isinstance(message, UserMessage):
            return self._user(message)
        if isinstance(message, ResultMessage):
            self._first_byte(now)
            return self._result(message)
        if isinstance(message, RateLimitEvent):
            return self._rate_limit(message)
        if isinstance(message, MirrorErrorMessage):
            self.outcome.mirror_errors += 1
            return [MirrorError(detail=truncate(redact(message.error), 500))]
        if isinstance(message, SystemMessage):
            return self._system(message)
        return []

    def _first_byte(self, now: float) -> None:
        if self.outcome.first_byte_at is None:
            self.outcome.first_byte_at = now

    def _session(self, raw: object) -> list[SessionStarted]:
        session_id = raw if isinstance(raw, str) else None
        if not session_id or session_id == self.outcome.session_id:
            return []
        self.outcome.session_id = session_id
        return [SessionStarted(session_id=session_id)]

    def _system(self, message: SystemMessage) -> Sequence[EventData]:
        data = _dict(message.data)
        if message.subtype == "init":
            self.model = _opt_text(data.get("model")) or self.model
            return self._session(data.get("session_id"))
        if message.subtype == "api_retry":
            self.outcome.api_retries += 1
            return [
                ApiRetry(
                    attempt=data.get("attempt"),
                    error_status=data.get("error_status"),
                    error=data.get("error"),
                    delay_ms=data.get("retry_delay_ms"),
                )
            ]
        return []

    def _assistant(self, message: AssistantMessage) -> list[SessionStarted | AssistantText | ToolCalled]:
        events: list[SessionStarted | AssistantText | ToolCalled] = [*self._session(message.session_id)]
        if message.error is not None:
            self.outcome.assistant_error = _text(message.error)
        for block in message.content if isinstance(message.content, list) else []:
            if isinstance(block, TextBlock) and block.text:
                events.append(AssistantText(text=truncate(redact(_text(block.text)))))
            elif isinstance(block, ToolUseBlock):
                name, use_id = _text(block.name), _text(block.id)
                self.outcome.tool_calls.append(name)
                self.tools_in_flight[use_id] = name
                events.append(ToolCalled(tool=name, id=use_id, input=_json_text(block.input)))
        if events and self._stream_usage:
            # What this attempt has used so far (from the stream events), so `claudeq top` can show a running job's
            # tokens before its result: the last such event is the latest figure.
            so_far = self.stream_usage()
            events[-1].tokens_so_far = TokensSoFar(
                input=so_far.input_tokens + so_far.cache_read_tokens + so_far.cache_creation_tokens,
                output=so_far.output_tokens,
            )
        return events

    def _user(self, message: UserMessage) -> list[ToolResult]:
        events: list[ToolResult] = []
        if not isinstance(message.content, list):
            return events
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                use_id = _text(block.tool_use_id)
                self.tools_in_flight.pop(use_id, None)
                full = redact(_result_text(block.content))
                text = truncate(full, self.tool_result_limit)
                event = ToolResult(id=use_id, is_error=bool(block.is_error), text=text)
                if len(full) > self.tool_result_limit:
                    event.chars = len(full)  # the whole result's length, in the session's transcript
                events.append(event)
        return events

    def _rate_limit(self, message: RateLimitEvent) -> list[RateLimited]:
        info = message.rate_limit_info
        signal = RateLimitSignal(
            status=_text(info.status),
            resets_at=_epoch(_number(info.resets_at)),
            window=_opt_text(info.rate_limit_type),
            utilization=_number(info.utilization),
        )
        self.outcome.rate_limits.append(signal)
        return [
            RateLimited(
                status=signal.status,
                window=signal.window,
                utilization=signal.utilization,
                resets_at=_iso(signal.resets_at),
            )
        ]

    def _result(self, message: ResultMessage) -> list[SessionStarted | ResultReceived]:
        events: list[SessionStarted | ResultReceived] = [*self._session(message.session_id)]
        out = self.outcome
        out.got_result = True
        out.is_error = message.is_error is not False  # success only when the CLI said so plainly
        out.subtype = _opt_text(message.subtype)
        out.terminal_reason = _opt_text(message.terminal_reason)
        out.api_error_status = _opt_int(message.api_error_status)
        out.errors = [redact(_text(e)) for e in message.errors] if isinstance(message.errors, list) else []
        self.tools_in_flight.clear()
        result = out.result
        result.text = redact(_text(message.result)) if message.result is not None else result.text
        result.structured_output = _redacted(message.structured_output)
        result.stop_reason = _opt_text(message.stop_reason)
        result.num_turns = _opt_int(message.num_turns)
        result.duration_ms = _opt_int(message.duration_ms)
        cost = _number(message.total_cost_usd)
        seen = self.stream_usage()
        if message.model_usage and isinstance(message.model_usage, dict):
            result.usage = usage_from_model_usage(message.model_usage, cost)
            if _tokens(seen) > _tokens(result.usage):
                # The result of an interrupted run (a watchdog, a cancel) leaves out the API message that was cut
                # off, which the service billed all the same (its message_start went out): the stream saw it.
                result.usage = seen
        else:
            result.usage = seen
            if cost is not None:
                result.usage.cost_usd = cost
        events.append(
            ResultReceived(
                is_error=out.is_error,
                subtype=out.subtype,
                num_turns=result.num_turns,
                duration_ms=result.duration_ms,
                cost_usd=result.usage.cost_usd,
                stop_reason=result.stop_reason,
            )
        )
        return events

    def _stream(self, message: StreamEvent, now: float) -> None:
        self._first_byte(now)
        event = _dict(message.event)
        kind = event.get("type")
        if kind == "message_start":
            msg = _dict(event.get("message"))
            key = _text(msg.get("id") or f"anon-{self._anon}")
            self._anon += 1
            usage = _dict(msg.get("usage"))
            creation = _dict(usage.get("cache_creation"))
            total_write = _int(usage.get("cache_creation_input_tokens"))
            write_1h = _int(creation.get("ephemeral_1h_input_tokens"))
            self._stream_usage[key] = _StreamUsage(
                model=_opt_text(msg.get("model")) or self.model,
                input_tokens=_int(usage.get("input_tokens")),
                output_tokens=_int(usage.get("output_tokens")),
                cache_read=_int(usage.get("cache_read_input_tokens")),
                cache_write_5m=max(total_write - write_1h, 0),
                cache_write_1h=write_1h,
            )
            self._current = key
        elif kind == "message_delta":
            current = self._stream_usage.get(self._current)
            usage = _dict(event.get("usage"))
            if current is not None and "output_tokens" in usage:
                # message_delta carries the cumulative output count of the message, not an increment.
                current.output_tokens = _int(usage.get("output_tokens"))

    def stream_usage(self) -> Usage:
        """Usage summed over the API messages the stream showed, priced with the list prices (worker/run/prices.py)."""
        per_model: dict[str, dict[str, Any]] = {}
        total = Usage()
        for item in self._stream_usage.values():
            model = item.model or "unknown"
            cost = cost_usd(
                model,
                input_tokens=item.input_tokens,
                output_tokens=item.output_tokens,
                cache_read_tokens=item.cache_read,
                cache_write_5m_tokens=item.cache_write_5m,
                cache_write_1h_tokens=item.cache_write_1h,
            )
            entry = per_model.setdefault(
                model,
                {
                    "inputTokens": 0,
                    "outputTokens": 0,
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "costUSD": 0.0,
                },
            )
            cache_creation = item.cache_write_5m + item.cache_write_1h
            entry["inputTokens"] += item.input_tokens
            entry["outputTokens"] += item.output_tokens
            entry["cacheReadInputTokens"] += item.cache_read
            entry["cacheCreationInputTokens"] += cache_creation
            entry["costUSD"] += cost
            total = total + Usage(
                input_tokens=item.input_tokens,
                output_tokens=item.output_tokens,
                cache_read_tokens=item.cache_read,
                cache_creation_tokens=cache_creation,
                cost_usd=cost,
            )
        total.model_usage = per_model
        return total

    def finish(self) -> RunOutcome:
        """The outcome so far; without a result, usage is what the stream events showed."""
        if not self.outcome.got_result:
            self.outcome.result.usage = self.stream_usage()
        return self.outcome


def _tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_creation_tokens


def usage_from_model_usage(model_usage: Any, total_cost_usd: float | None = None) -> Usage:
    """`Usage` from `ResultMessage.model_usage` (subagents included), the per-model dicts kept verbatim."""
    usage = Usage(model_usage={str(k): dict(v) for k, v in dict(model_usage).items() if isinstance(v, dict)})
    cost = 0.0
    for entry in usage.model_usage.values():
        usage.input_tokens += _int(entry.get("inputTokens"))
        usage.output_tokens += _int(entry.get("outputTokens"))
        usage.cache_read_tokens += _int(entry.get("cacheReadInputTokens"))
        usage.cache_creation_tokens += _int(entry.get("cacheCreationInputTokens"))
        cost += _number(entry.get("costUSD")) or 0.0
    usage.cost_usd = cost if usage.model_usage else float(total_cost_usd or 0.0)
    return usage


def _redacted(value: Any) -> Any:
    """`value` (structured output: any JSON) with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value
