"""The workspace hook alone (what holds a worker that is not root): paths read the way the CLI reads them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.settings import WorkerPolicy
from claudeq.worker.run.options import workspace_hook


def _decide(tmp_path: Path, tool: str, tool_input: dict[str, Any]) -> str | None:
    root, home = tmp_path / "ws", tmp_path / "home"
    for folder in (root, home, tmp_path / "outside"):
        folder.mkdir(exist_ok=True)
    if not (root / "link").exists():
        (root / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    hook = workspace_hook(WorkerPolicy(workspace_roots=[root]), home)
    data = {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input, "cwd": str(root)}
    out = asyncio.run(hook(data, None, {"signal": None}))  # type: ignore[arg-type]
    if not out:
        return None
    return str(out["hookSpecificOutput"]["permissionDecisionReason"])  # type: ignore[typeddict-item]


OUTSIDE = [
    "~",
    "~/",
    "~/secret.txt",
    "~/../outside/secret.txt",
    "~root",
    "~root/.bashrc",
    "~no-such-user-cqt/x",
    "../outside/secret.txt",
    "link/secret.txt",
    "/etc/passwd",
    "/tmp/../etc/passwd",
]


@pytest.mark.parametrize("tool", ["Read", "Glob", "Grep", "LS", "Edit", "MultiEdit", "Write", "NotebookRead"])
@pytest.mark.parametrize("path", OUTSIDE)
def test_every_path_form_outside_the_roots_is_denied(tmp_path: Path, tool: str, path: str) -> None:
    field = "path" if tool in ("Glob", "Grep", "LS") else "file_path"
    reason = _decide(tmp_path, tool, {field: path, "pattern": "*"})
    assert reason is not None and "outside the workspace roots" in reason, (tool, path)


@pytest.mark.parametrize("pattern", ["../x/*", "{..,a}/*", "~/*", "~root/*", "/etc/*", "**/../*"])
def test_patterns_that_may_climb_are_denied(tmp_path: Path, pattern: str) -> None:
    assert _decide(tmp_path, "Glob", {"pattern": pattern}) is not None
    assert _decide(tmp_path, "Grep", {"pattern": "x", "glob": pattern}) is not None


@pytest.mark.parametrize("tool_input", [{"file_path": "inside.txt"}, {"path": "sub/dir"}, {"pattern": "**/*.py"}])
def test_paths_inside_the_roots_are_allowed(tmp_path: Path, tool_input: dict[str, Any]) -> None:
    assert _decide(tmp_path, "Grep", tool_input) is None


UNCLEAN = [" /etc", "\t/etc", "\n/etc", "/etc ", "inside.txt ", " inside.txt", "in\x00side.txt", "in\rside", "a\x7fb"]


@pytest.mark.parametrize("tool", ["Read", "Glob", "Grep", "LS", "Edit", "Write", "NotebookEdit"])
@pytest.mark.parametrize("path", UNCLEAN)
def test_a_path_with_whitespace_around_it_or_a_control_character_is_refused_as_it_is(
    tmp_path: Path, tool: str, path: str
) -> None:
    """The CLI trims or reinterprets such a path (" /etc" is /etc to it): judged as the exact string, even one
    that would name a place inside the roots once cleaned, and the agent is told why."""
    field = {"Glob": "path", "Grep": "path", "LS": "path", "NotebookEdit": "notebook_path"}.get(tool, "file_path")
    reason = _decide(tmp_path, tool, {field: path})
    assert reason is not None and "give the exact path" in reason, (tool, path, reason)


@pytest.mark.parametrize("pattern", [" /etc/*", "\n*.txt", "*.txt\t"])
def test_a_glob_pattern_with_whitespace_around_it_is_refused(tmp_path: Path, pattern: str) -> None:
    assert "give the exact pattern" in (_decide(tmp_path, "Glob", {"pattern": pattern}) or "")
    assert "give the exact pattern" in (_decide(tmp_path, "Grep", {"pattern": "x", "glob": pattern}) or "")


def test_a_regular_expression_with_spaces_is_grep_s_own_business(tmp_path: Path) -> None:
    assert _decide(tmp_path, "Grep", {"pattern": " two words "}) is None
