"""What the simulated model answers: text, a tool call or StructuredOutput, with its output token count."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from .directives import Steering, strip_directives
from .protocol import STRUCTURED_OUTPUT_TOOL, MessagesRequest, Turn, message_text
from .schema import SchemaError, generate
from .usage import CHARS_PER_TOKEN, estimate_tokens

_FILLER = ["the", "simulated", "model", "keeps", "talking", "so", "this", "reply", "has", "its", "length"]
_SESSION = re.compile(r"<session>(.*?)</session>", re.DOTALL)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


@dataclass
class ReplyBlock:
    """One content block of the reply."""

    type: Literal["text", "tool_use"]
    text: str = ""
    name: str = ""
    id: str = ""
    input: Any = None

    def content(self) -> dict[str, Any]:
        """The block as it appears in a non-streaming message."""
        if self.type == "text":
            return {"type": "text", "text": self.text}
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


@dataclass
class Reply:
    """A whole reply: blocks, stop reason and output tokens."""

    blocks: list[ReplyBlock]
    stop_reason: Literal["end_turn", "tool_use"]
    output_tokens: int


def _snippet(text: str, words: int) -> str:
    cleaned = " ".join(_REMINDER.sub(" ", strip_directives(text)).split())
    parts = cleaned.split(" ")
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def _pad_to_tokens(text: str, tokens: int) -> str:
    # Deterministic filler so a long reply really has the length (and streaming time) it reports.
    # Built in one go (linear time): it runs on the event loop.
    target = tokens * CHARS_PER_TOKEN
    if len(text) >= target:
        return text
    cycle = " ".join(_FILLER) + " "
    missing = target - len(text) - 1
    return (text + " " + cycle * (missing // len(cycle) + 1))[:target]


def _tool_use(name: str, tool_input: Any) -> ReplyBlock:
    return ReplyBlock("tool_use", name=name, id="toolu_sim_" + uuid.uuid4().hex[:20], input=tool_input)


def _output_tokens(blocks: list[ReplyBlock]) -> int:
    total = 0
    for b in blocks:
        size = len(b.text) if b.type == "text" else len(json.dumps(b.input)) + len(b.name)
        total += estimate_tokens(size)
    return max(total, 1)


def title_reply(req: MessagesRequest) -> Reply:
    """Answer the CLI's session-title side request with `{"title": …}` taken from the prompt."""
    text = message_text(req.messages[-1]) if req.messages else ""
    m = _SESSION.search(text)
    title = _snippet(m.group(1) if m else text, 6) or "Simulated session"
    block = ReplyBlock("text", text=json.dumps({"title": title}))
    return Reply([block], "end_turn", _output_tokens([block]))


def plan_reply(req: MessagesRequest, turn: Turn, steering: Steering) -> Reply:
    """Decide the reply: the next directed tool call, then StructuredOutput if offered, then final text."""
    if steering.again is not None:
        return _finish([_tool_use(steering.again.name, steering.again.input)], "tool_use", steering)
    done_calls = [name for _, name in turn.tool_calls if name != STRUCTURED_OUTPUT_TOOL]
    if len(done_calls) < len(steering.tools):
        call = steering.tools[len(done_calls)]
        return _finish([_tool_use(call.name, call.input)], "tool_use", steering)
    schema = req.tool_schema(STRUCTURED_OUTPUT_TOOL)
    if schema is not None and not any(name == STRUCTURED_OUTPUT_TOOL for _, name in turn.tool_calls):
        if steering.has_structured:
            value = steering.structured
        else:
            try:
                value = generate(schema, "value")
            except SchemaError as e:
                value = {"error": f"simulator cannot satisfy this schema: {e}"}
        return _finish([_tool_use(STRUCTURED_OUTPUT_TOOL, value)], "tool_use", steering)
    if turn.last_is_tool_result and turn.results:
        said = f"Tool said: {turn.results[-1][1]}"
        text = f"{steering.text}\n\n{said}" if steering.text else said
    elif steering.text is not None:
        text = steering.text
    else:
        text = f"This is a simulated reply to: {_snippet(turn.prompt_text, 12) or '(no prompt)'}"
    return _finish([ReplyBlock("text", text=text)], "end_turn", steering)


def _finish(blocks: list[ReplyBlock], stop: Literal["end_turn", "tool_use"], steering: Steering) -> Reply:
    if steering.tokens_out is None:
        return Reply(blocks, stop, _output_tokens(blocks))
    if blocks[-1].type == "text":
        blocks[-1].text = _pad_to_tokens(blocks[-1].text, steering.tokens_out)
    return Reply(blocks, stop, steering.tokens_out)
