"""Server-sent events of a streamed Messages API reply, and the non-streaming message body."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .replies import Reply, ReplyBlock
from .usage import Usage

# Characters per text_delta / input_json_delta: small enough that a long reply streams in many events.
TEXT_CHUNK_CHARS = 48
JSON_CHUNK_CHARS = 64


def event(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event as the API writes it: `event: NAME`, `data: JSON`, blank line."""
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def new_message_id() -> str:
    """A message id in the API's `msg_…` style."""
    return "msg_sim_" + uuid.uuid4().hex[:24]


def usage_json(usage: Usage, output_tokens: int) -> dict[str, Any]:
    """The `usage` object of message_start (output 0: the CLI takes output from message_delta)."""
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_creation_input_tokens - usage.cache_creation_1h_tokens,
            "ephemeral_1h_input_tokens": usage.cache_creation_1h_tokens,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_start(message_id: str, model: str, usage: Usage) -> bytes:
    """message_start (with the input-side usage) followed by a ping, as the API sends them."""
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage_json(usage, 0),
    }
    return event("message_start", {"type": "message_start", "message": message}) + event("ping", {"type": "ping"})


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def block_events(index: int, block: ReplyBlock) -> list[tuple[int, bytes]]:
    """Events of one content block as (characters of output carried, bytes); tool input goes as
    input_json_delta, the only form the CLI reads (docs/cli-behaviour.md#tool-use-on-the-wire)."""
    out: list[tuple[int, bytes]] = []
    if block.type == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [({"type": "text_delta", "text": c}, len(c)) for c in _chunks(block.text, TEXT_CHUNK_CHARS)]
    else:
        start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        payload = json.dumps(block.input)
        deltas = [({"type": "input_json_delta", "partial_json": c}, len(c)) for c in _chunks(payload, JSON_CHUNK_CHARS)]
    out.append(
        (0, event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
    )
    for delta, size in deltas:
        out.append(
            (size, event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        )
    out.append((0, event("content_block_stop", {"type": "content_block_stop", "index": index})))
    return out


def message_end(reply: Reply) -> bytes:
    """message_delta (stop reason, output tokens) and message_stop."""
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": reply.output_tokens},
    }
    return event("message_delta", delta) + event("message_stop", {"type": "message_stop"})


def message_body(message_id: str, model: str, reply: Reply, usage: Usage) -> bytes:
    """The JSON body of a non-streaming reply."""
    return json.dumps(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [b.content() for b in reply.blocks],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage_json(usage, reply.output_tokens),
        }
    ).encode()
