"""Which tool uses wait for a person's approval (pure): the rules of `approve_tools` (docs/jobs.md#tool-approval).

A rule is a tool name or glob (`"Bash"`, `"mcp__claudeq__*"`), or `{"tool": …, "match": …}`, where `match` is a
glob on the input that says what the call does: a `Bash` call's `command`, a file tool's path, else the input's
JSON. A call needs approval when any rule matches it.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Input fields that say what a call does, by tool (the first present one is matched); other tools: the input's JSON.
SUBJECT_FIELDS: dict[str, tuple[str, ...]] = {
    "Bash": ("command",),
    "Read": ("file_path",),
    "Write": ("file_path",),
    "Edit": ("file_path",),
    "MultiEdit": ("file_path",),
    "NotebookEdit": ("notebook_path",),
    "WebFetch": ("url",),
    "WebSearch": ("query",),
    "Glob": ("pattern",),
    "Grep": ("pattern",),
}
#: The most rules one spec may give.
MAX_RULES = 50


class ApprovalRule(BaseModel):
    """Calls of `tool` (a name or glob) wait for approval; with `match`, only those whose subject matches it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1, max_length=200, description="Tool name or glob (`Bash`, `mcp__claudeq__*`).")
    match: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="Glob on the call's command (Bash), path (file tools), URL, query, or input JSON.",
    )


def rule_of(value: str | ApprovalRule) -> ApprovalRule:
    """A rule as given (a bare string names a tool)."""
    return ApprovalRule(tool=value) if isinstance(value, str) else value


def subject(tool: str, tool_input: dict[str, Any]) -> str:
    """What a call of `tool` does, as the text `match` globs are tested against."""
    for name in SUBJECT_FIELDS.get(tool, ()):
        value = tool_input.get(name)
        if isinstance(value, str):
            return value
    return json.dumps(tool_input, sort_keys=True, separators=(",", ":"))


def tool_named(rules: list[ApprovalRule], tool: str) -> bool:
    """Whether some rule may apply to calls of `tool` (so the CLI must ask before each one)."""
    return any(fnmatchcase(tool, rule.tool) for rule in rules)


def needs_approval(rules: list[ApprovalRule], tool: str, tool_input: dict[str, Any]) -> ApprovalRule | None:
    """The first rule that makes this call wait for approval, or None."""
    text: str | None = None
    for rule in rules:
        if not fnmatchcase(tool, rule.tool):
            continue
        if rule.match is None:
            return rule
        text = subject(tool, tool_input) if text is None else text
        if fnmatchcase(text, rule.match):
            return rule
    return None
