"""ToolRegistry: loads a module's TOOLS, looks tools up, builds a per-job in-process MCP server."""

from __future__ import annotations

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import ConfigError
from claudeq.worker.run.tools import SERVER_NAME, ToolRegistry, wire_name


def test_loads_tools_from_the_configured_module() -> None:
    settings = Settings(_env_file=None, policy=WorkerPolicy(mcp_tools_module="tests.support.sample_tools"))  # type: ignore[call-arg]
    registry = ToolRegistry.from_settings(settings)
    assert registry.names == ["add", "whoami"]
    assert registry.get("add") is not None
    assert registry.unknown(["add", "nope"]) == ["nope"]


def test_server_offers_only_the_requested_tools() -> None:
    registry = ToolRegistry.from_module("tests.support.sample_tools")
    server = registry.server(["add"])
    assert server["type"] == "sdk"
    assert server["name"] == SERVER_NAME
    assert wire_name("add") == "mcp__claudeq__add"
    with pytest.raises(KeyError):
        registry.server(["nope"])


async def test_sample_add_tool_computes() -> None:
    tool = ToolRegistry.from_module("tests.support.sample_tools").get("add")
    assert tool is not None
    assert await tool.handler({"a": 2, "b": 3}) == {"content": [{"type": "text", "text": "sum=5"}]}


@pytest.mark.parametrize("module", ["no.such.module", "tests.support"])
def test_bad_module_is_a_config_error(module: str) -> None:
    with pytest.raises(ConfigError) as err:
        ToolRegistry.from_module(module)
    assert err.value.field == "CLAUDEQ_POLICY__MCP_TOOLS_MODULE"


def test_no_module_means_no_tools() -> None:
    assert ToolRegistry.from_settings(Settings(_env_file=None)).names == []  # type: ignore[call-arg]


def test_fleet_tools_are_offered_only_when_the_policy_says_so() -> None:
    off = ToolRegistry.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]
    assert off.unknown(["submit_job"]) == ["submit_job"]
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        policy=WorkerPolicy(fleet_tools=True, mcp_tools_module="tests.support.sample_tools"),
    )
    on = ToolRegistry.from_settings(settings)
    assert on.names == ["accounts", "add", "cancel_job", "get_job", "list_jobs", "submit_job", "wait_job", "whoami"]
    assert on.unknown(["submit_job", "wait_job", "nope"]) == ["nope"]
    assert on.mixes_fleet(["submit_job", "add"]) and not on.mixes_fleet(["submit_job", "wait_job"])
    with pytest.raises(KeyError):
        on.server(["submit_job", "add"])


async def test_fleet_server_is_claudeq_mcp_bound_to_the_run_and_offers_only_the_named_tools() -> None:
    from mcp.server import Server

    settings = Settings(_env_file=None, policy=WorkerPolicy(fleet_tools=True))  # type: ignore[call-arg]
    config = ToolRegistry.from_settings(settings).server(["submit_job", "wait_job"], job_id="parent-1")
    assert config["type"] == "sdk" and config["name"] == SERVER_NAME
    assert isinstance(config["instance"], Server)  # the SDK serves it to the CLI in-process
