"""producer/transcript_view.py: a transcript's entries become the conversation a person reads."""

from __future__ import annotations

from typing import Any

from claudeq.producer.transcript_view import Block, block_line, conversation


def assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "assistant",
        "timestamp": "2026-12-07T10:00:01Z",
        "message": {"role": "assistant", "content": list(content)},
    }


def user(content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": content}, **extra}


ENTRIES: list[dict[str, Any]] = [
    {"type": "queue-operation", "operation": "enqueue", "content": "the prompt"},
    user("the prompt\nover two lines"),
    user("<command-caveat>", isMeta=True),
    {"type": "attachment", "attachment": {"type": "date"}},
    assistant({"type": "thinking", "thinking": "which file?"}, {"type": "redacted_thinking", "data": "x"}),
    assistant(
        {"type": "text", "text": "Reading it."}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a"}}
    ),
    user([{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [{"type": "text", "text": "no"}]}]),
    assistant({"type": "tool_use", "id": "t2", "name": "Glob", "input": {"pattern": "*"}}),
    user([{"type": "tool_result", "tool_use_id": "t2", "content": "a.md"}, {"type": "text", "text": "go on"}]),
    assistant({"type": "text", "text": "Done."}),
]


def test_the_conversation_keeps_what_was_said_and_leaves_out_the_bookkeeping() -> None:
    blocks = conversation(ENTRIES)
    assert blocks == [
        Block("user", "the prompt\nover two lines"),
        Block("thinking", "which file?", at="2026-12-07T10:00:01Z"),
        Block("thinking", "(redacted)", at="2026-12-07T10:00:01Z"),
        Block("assistant", "Reading it.", at="2026-12-07T10:00:01Z"),
        Block("tool_use", '{"p": "a"}', tool="Read", at="2026-12-07T10:00:01Z"),
        Block("tool_result", "no", tool="Read", is_error=True),
        Block("tool_use", '{"pattern": "*"}', tool="Glob", at="2026-12-07T10:00:01Z"),
        Block("tool_result", "a.md", tool="Glob"),
        Block("user", "go on"),
        Block("assistant", "Done.", at="2026-12-07T10:00:01Z"),
    ]
    assert blocks[5].entry is ENTRIES[6]  # the entry itself, for the raw view


def test_a_block_is_one_line_per_line_of_text_indented_after_the_first() -> None:
    lines = [block_line(b) for b in conversation(ENTRIES)]
    assert lines[0] == "user: the prompt\n  over two lines"
    assert lines[4:6] == ['tool use Read {"p": "a"}', "tool error Read: no"]
    assert lines[7] == "tool result Glob: a.md"
