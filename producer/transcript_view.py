"""A session's transcript as the conversation a person reads: what the user said, what the assistant said and
thought, each tool it used and what came back (docs/cli.md#transcripts). `claudeq transcript` prints it and the web
view draws it; the CLI's bookkeeping entries (attachments, queue operations, request routes, …) are left out, and
both offer the entries themselves on demand."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal["user", "assistant", "thinking", "tool_use", "tool_result"]


@dataclass(frozen=True)
class Block:
    """One turn's piece: its kind, its text (a tool use's input as JSON), the tool's name for a use or a result."""

    kind: BlockKind
    text: str
    tool: str | None = None
    is_error: bool = False
    at: str | None = None  # the entry's timestamp (ISO 8601), when it has one
    entry: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _text_of(content: Any) -> str:
    """A tool result's content (a string, or a list of text and other blocks) as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, Mapping):
                parts.append(f"[{part.get('type', '?')}]")  # an image or a document: named, not shown
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def conversation(entries: Iterable[Mapping[str, Any]]) -> list[Block]:
    """The conversation in `entries` (a session's transcript, in order)."""
    blocks: list[Block] = []
    tools: dict[str, str] = {}  # tool_use id -> tool name, to name each result
    for entry in entries:
        kind, message = entry.get("type"), entry.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, Mapping) or entry.get("isMeta"):
            continue
        at = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
        content = message.get("content")
        if isinstance(content, str):
            blocks.append(Block(kind, content, at=at, entry=entry))
            continue
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, Mapping):
                continue
            what = part.get("type")
            if what == "text":
                blocks.append(Block(kind, str(part.get("text", "")), at=at, entry=entry))
            elif what == "thinking":
                blocks.append(Block("thinking", str(part.get("thinking", "")), at=at, entry=entry))
            elif what == "redacted_thinking":
                blocks.append(Block("thinking", "(redacted)", at=at, entry=entry))
            elif what == "tool_use":
                name = str(part.get("name", "?"))
                tools[str(part.get("id"))] = name
                text = json.dumps(part.get("input"), ensure_ascii=False)
                blocks.append(Block("tool_use", text, tool=name, at=at, entry=entry))
            elif what == "tool_result":
                name = tools.get(str(part.get("tool_use_id")), "?")
                text = _text_of(part.get("content"))
                blocks.append(Block("tool_result", text, name, bool(part.get("is_error")), at, entry))
    return blocks


#: How each kind of block starts its line in `claudeq transcript`.
LABELS: dict[BlockKind, str] = {
    "user": "user",
    "assistant": "assistant",
    "thinking": "thinking",
    "tool_use": "tool use",
    "tool_result": "tool result",
}


def block_line(block: Block) -> str:
    """A block as `claudeq transcript` prints it: `user: …`, `tool use NAME {…}`, `tool error NAME: …`; lines after
    the first indented by two spaces."""
    if block.kind == "tool_use":
        head = f"tool use {block.tool} "
    elif block.kind == "tool_result":
        head = f"{'tool error' if block.is_error else 'tool result'} {block.tool}: "
    else:
        head = f"{LABELS[block.kind]}: "
    return head + block.text.replace("\n", "\n  ")
