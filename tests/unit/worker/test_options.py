"""build_options: spec + policy -> ClaudeAgentOptions; what the policy forbids raises PolicyViolation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import PolicyViolation
from claudeq.models import JobSpec
from claudeq.worker.run.cli_env import SDK_VARS
from claudeq.worker.run.options import CliLaunch, build_options
from claudeq.worker.run.tools import ToolRegistry
from claudeq.worker.run.workdirs import default_cwd

REGISTRY = ToolRegistry.from_module("tests.support.sample_tools")


def settings_with(**policy: Any) -> Settings:
    return Settings(_env_file=None, policy=WorkerPolicy(**policy))  # type: ignore[call-arg]


def build(spec: JobSpec, settings: Settings | None = None) -> ClaudeAgentOptions:
    return build_options(spec, settings or settings_with(), launch=CliLaunch({"X": "1"}, "/w.sh"), tools=REGISTRY)


def test_default_profile_offers_no_builtin_tools() -> None:
    options = build(JobSpec(prompt="hi"))
    assert options.tools == []  # allowed_tools=[] alone would leave every built-in offered
    assert options.allowed_tools == []
    assert options.mcp_servers == {}
    assert options.hooks is None
    assert options.setting_sources == []
    assert options.strict_mcp_config is True
    assert options.include_partial_messages is True
    assert options.permission_mode is None
    assert options.cwd == default_cwd()
    assert options.env["X"] == "1"
    assert options.env["CLAUDEQ_ENV_KEEP"].split() == sorted({"X", *SDK_VARS})  # what the wrapper keeps
    assert options.cli_path == "/w.sh"


def test_profile_tools_mcp_tools_and_model_settings() -> None:
    spec = JobSpec(
        prompt="hi",
        tools="web",
        mcp_tools=["add"],
        model="opus",
        fallback_model="sonnet",
        max_turns=3,
        max_budget_usd=0.5,
        effort="low",
        thinking="enabled",
        thinking_budget_tokens=2048,
        append_system_prompt="Be brief.",
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    options = build(spec)
    assert options.tools == ["WebFetch", "WebSearch"]
    assert options.allowed_tools == ["WebFetch", "WebSearch", "mcp__claudeq__add"]
    assert set(options.mcp_servers) == {"claudeq"}  # type: ignore[arg-type]
    assert (options.model, options.fallback_model, options.max_turns, options.max_budget_usd) == (
        "opus",
        "sonnet",
        3,
        0.5,
    )
    assert options.effort == "low"
    assert options.thinking == {"type": "enabled", "budget_tokens": 2048}
    assert options.system_prompt == {
        "type": "preset",
        "preset": "claude_code",
        "append": "Be brief.",
        "exclude_dynamic_sections": True,
    }
    assert options.output_format == {"type": "json_schema", "schema": spec.output_schema}


@pytest.mark.parametrize(
    ("spec", "fleet", "cacheable", "expected"),
    [
        ({}, "claude_code", True, {"type": "preset", "preset": "claude_code", "exclude_dynamic_sections": True}),
        ({}, "claude_code", False, {"type": "preset", "preset": "claude_code"}),
        ({}, "minimal", True, None),
        ({"append_system_prompt": "Be brief."}, "minimal", True, "Be brief."),
        ({"base_prompt": "minimal"}, "claude_code", True, None),
        (
            {"base_prompt": "claude_code", "append_system_prompt": "Be brief."},
            "minimal",
            False,
            {"type": "preset", "preset": "claude_code", "append": "Be brief."},
        ),
    ],
)
def test_the_base_prompt_comes_from_the_spec_else_the_fleet(
    spec: dict[str, Any], fleet: str, cacheable: bool, expected: object
) -> None:
    settings = Settings(_env_file=None, base_prompt=fleet, cacheable_prompts=cacheable)  # type: ignore[call-arg]
    assert build(JobSpec(prompt="hi", **spec), settings).system_prompt == expected


def test_a_base_prompt_beside_a_whole_system_prompt_is_refused() -> None:
    with pytest.raises(ValueError, match=r"system_prompt .* or base_prompt"):
        JobSpec(prompt="hi", system_prompt="You add.", base_prompt="minimal")


def test_custom_system_prompt_with_append() -> None:
    options = build(JobSpec(prompt="hi", system_prompt="You add.", append_system_prompt="Briefly."))
    assert options.system_prompt == "You add.\n\nBriefly."


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (JobSpec(prompt="x", tools=["Bash"]), "tools"),
        (JobSpec(prompt="x", tools="shell"), "tools"),
        (JobSpec(prompt="x", mcp_tools=["rm_rf"]), "mcp_tools"),
        (JobSpec(prompt="x", permission_mode="bypassPermissions"), "permission_mode"),
        (JobSpec(prompt="x", cwd="/etc"), "cwd"),
    ],
)
def test_policy_violations(spec: JobSpec, field: str) -> None:
    with pytest.raises(PolicyViolation) as err:
        build(spec)
    assert err.value.field == field


def test_cwd_and_add_dirs_must_be_under_roots(tmp_path: Path) -> None:
    inside = tmp_path / "ws"
    inside.mkdir()
    settings = settings_with(workspace_roots=[tmp_path])
    options = build(JobSpec(prompt="x", cwd=str(inside), add_dirs=[str(tmp_path)]), settings)
    assert options.cwd == str(inside)
    with pytest.raises(PolicyViolation) as err:
        build(JobSpec(prompt="x", cwd=str(inside), add_dirs=["/usr"]), settings)
    assert err.value.field == "add_dirs"
    with pytest.raises(PolicyViolation):
        build(JobSpec(prompt="x", cwd=str(tmp_path / "missing")), settings)


def test_allowed_permission_mode_is_passed() -> None:
    assert build(JobSpec(prompt="x", permission_mode="dontAsk")).permission_mode == "dontAsk"


async def _decide(options: ClaudeAgentOptions, tool: str, tool_input: dict[str, Any], cwd: str) -> str | None:
    assert options.hooks is not None
    [matcher] = options.hooks["PreToolUse"]
    assert matcher.matcher is not None and tool in matcher.matcher.split("|")
    data: Any = {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input, "cwd": cwd}
    out: Any = await matcher.hooks[0](data, "toolu_1", {"signal": None})
    return out.get("hookSpecificOutput", {}).get("permissionDecision")


async def test_file_tool_hook_keeps_paths_inside_roots(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside").mkdir()
    link = ws / "escape"
    link.symlink_to(tmp_path / "outside")
    settings = settings_with(workspace_roots=[ws])
    options = build(JobSpec(prompt="x", tools="read-only", cwd=str(ws)), settings)
    cwd = str(ws)
    assert await _decide(options, "Read", {"file_path": str(ws / "a.txt")}, cwd) is None
    assert await _decide(options, "Read", {"file_path": "a.txt"}, cwd) is None
    assert await _decide(options, "Read", {"file_path": "/etc/passwd"}, cwd) == "deny"
    assert await _decide(options, "Read", {"file_path": "../outside/x"}, cwd) == "deny"
    assert await _decide(options, "Read", {"file_path": str(link / "x")}, cwd) == "deny"  # symlinks resolved
    assert await _decide(options, "Grep", {"pattern": "foo"}, cwd) is None
    assert await _decide(options, "Grep", {"pattern": "foo"}, "/") == "deny"  # no path: the cwd counts
    assert await _decide(options, "Glob", {"pattern": "../../*"}, cwd) == "deny"
