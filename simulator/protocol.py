"""Reading a Messages API request: validation (with the real API's 400/404 bodies) and conversation state."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError
from .usage import TTL_S, Segment

# The CLI's session-title side request carries this system text (docs/cli-behaviour.md#traffic-of-one-run).
TITLE_SYSTEM_MARKER = "You are naming a coding session"
STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
_ROLES = ("user", "assistant", "system")


def _invalid(message: str) -> ApiError:
    return ApiError(400, message)


@dataclass
class MessagesRequest:
    """A validated `POST /v1/messages` body, plus what the simulator derives from it."""

    model: str
    stream: bool
    max_tokens: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    system_text: str
    is_title: bool
    raw: dict[str, Any] = field(repr=False)

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered (the CLI's deferred MCP tools are not among them)."""
        return [str(t.get("name", "")) for t in self.tools]

    def tool_schema(self, name: str) -> Any:
        """The input_schema of the offered tool `name`, or None."""
        for tool in self.tools:
            if tool.get("name") == name:
                return tool.get("input_schema", {})
        return None


def parse_request(body: bytes) -> MessagesRequest:
    """Validate a request body; raise ApiError(400 / 404) worded like the real API."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _invalid(f"There was an error parsing the body of your request: {e}") from None
    except RecursionError:
        raise _invalid("There was an error parsing the body of your request: nested too deeply") from None
    if not isinstance(data, dict):
        raise _invalid("body: Input should be a valid dictionary")
    for key in ("model", "messages", "max_tokens"):
        if key not in data:
            raise _invalid(f"{key}: Field required")
    model = data["model"]
    if not isinstance(model, str) or not model:
        raise _invalid("model: Input should be a valid string")
    max_tokens = data["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _invalid("max_tokens: Input should be a valid integer greater than or equal to 1")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("stream: Input should be a valid boolean")
    messages = data["messages"]
    if not isinstance(messages, list):
        raise _invalid("messages: Input should be a valid list")
    if not messages:
        raise _invalid("messages: at least one message is required")
    for i, msg in enumerate(messages):
        _check_message(i, msg)
    tools = data.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _invalid("tools: Input should be a valid list of tool objects")
    system_text = _system_text(data.get("system"))
    # Any model id of the claude family is served (the CLI maps aliases to such ids).
    if not model.startswith("claude-"):
        raise ApiError(404, f"model: {model}")
    return MessagesRequest(
        model=model,
        stream=stream,
        max_tokens=max_tokens,
        messages=messages,
        tools=tools,
        system_text=system_text,
        is_title=TITLE_SYSTEM_MARKER in system_text,
        raw=data,
    )


def _check_message(i: int, msg: Any) -> None:
    if not isinstance(msg, dict):
        raise _invalid(f"messages.{i}: Input should be a valid dictionary")
    if msg.get("role") not in _ROLES:
        raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    content = msg.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _invalid(f"messages.{i}.content: Input should be a valid string or list")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _invalid(f"messages.{i}.content.{j}: Input should be a content block with a type")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise _invalid(f"messages.{i}.content.{j}.text: Input should be a valid string")


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    raise _invalid("system: Input should be a valid string or list of text blocks")


def _blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_result_text(block: dict[str, Any]) -> str:
    """The text inside a tool_result block (its content is a string or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") == "text")
    return ""


def message_text(msg: dict[str, Any]) -> str:
    """Concatenated text and tool_result text of a message (what the request log shows)."""
    parts = []
    for block in _blocks(msg):
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(tool_result_text(block))
    return "".join(parts)


@dataclass
class Turn:
    """Where the conversation stands: the latest prompt and the tool calls made since."""

    prompt_index: int | None
    prompt_text: str  # every text block of the prompt message
    directive_text: str  # only the text blocks that carry `[[sim:` (the message key for counters)
    tool_calls: list[tuple[str, str]]  # (tool_use id, name) of assistant tool_use blocks since the prompt
    results: list[tuple[str, str]]  # (tool_use id, text) of tool_result blocks since the prompt
    last_is_tool_result: bool


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text blocks of the last user message (the CLI may merge a new prompt into the message that holds the
    previous tool results, when it resumes a session: docs/cli-behaviour.md#tool-approval-can_use_tool)."""
    last = next((m for m in reversed(messages) if m.get("role") != "system"), None)
    if last is None or last.get("role") != "user":
        return ""
    return "\n".join(str(b.get("text", "")) for b in _blocks(last) if b.get("type") == "text")


def current_turn(messages: list[dict[str, Any]]) -> Turn:
    """Find the latest user message with plain text (not a tool_result) and what happened after it."""
    prompt_index = None
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.get("role") != "user":
            continue
        blocks = _blocks(msg)
        if any(b.get("type") == "text" for b in blocks) and not any(b.get("type") == "tool_result" for b in blocks):
            prompt_index = i
            break
    prompt_text = directive_text = ""
    if prompt_index is not None:
        texts = [str(b.get("text", "")) for b in _blocks(messages[prompt_index]) if b.get("type") == "text"]
        prompt_text = "\n".join(texts)
        directive_text = "\n".join(t for t in texts if "[[sim:" in t)
    calls: list[tuple[str, str]] = []
    results: list[tuple[str, str]] = []
    for msg in messages[(prompt_index + 1 if prompt_index is not None else 0) :]:
        for block in _blocks(msg):
            if block.get("type") == "tool_use":
                calls.append((str(block.get("id", "")), str(block.get("name", ""))))
            elif block.get("type") == "tool_result":
                results.append((str(block.get("tool_use_id", "")), tool_result_text(block)))
    # The CLI appends a role "system" message (its environment) after the prompt: skip it.
    last = next((m for m in reversed(messages) if m.get("role") != "system"), None)
    last_blocks = _blocks(last) if last is not None else []
    last_is_tool_result = any(b.get("type") == "tool_result" for b in last_blocks)
    return Turn(prompt_index, prompt_text, directive_text, calls, results, last_is_tool_result)


def _without_cache_control(value: Any) -> Any:
    # The CLI moves its cache breakpoints from turn to turn; they must not change what counts as a prefix.
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


#: The CLI's first system block: an attribution header whose value fingerprints the prompt
#: (docs/cli-behaviour.md#prompt-caching). Read as a header, it is no part of a cached prefix.
BILLING_HEADER = "x-anthropic-billing-header:"


def is_billing_header(block: Any) -> bool:
    """Whether a system block is the CLI's billing header rather than prompt text."""
    return isinstance(block, dict) and str(block.get("text", "")).startswith(BILLING_HEADER)


def _ttl_key(block: Any) -> str | None:
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(control, dict):
        return None
    ttl = control.get("ttl")
    return ttl if ttl in TTL_S else "5m"


def prompt_segments(req: MessagesRequest) -> list[Segment]:
    """The request's blocks in the API's cache order — tools, system blocks, then each message's content blocks —
    each with the breakpoint that follows it. The model leads (a prefix is cached per model)."""

    def seg(value: Any, ttl: str | None) -> Segment:
        return Segment(json.dumps(_without_cache_control(value), separators=(",", ":")).encode(), ttl)

    segments = [Segment(json.dumps({"model": req.model}).encode())]
    segments += [seg(tool, _ttl_key(tool)) for tool in req.tools]
    system = req.raw.get("system")
    if isinstance(system, list):
        segments += [seg(block, _ttl_key(block)) for block in system if not is_billing_header(block)]
    elif system:
        segments.append(seg(system, None))
    for message in req.messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        segments += [seg({"role": message.get("role"), "block": b}, _ttl_key(b)) for b in blocks]
    return segments
