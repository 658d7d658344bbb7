"""ToolRegistry: loads a module's TOOLS, looks tools up, builds a per-job in-process MCP server."""

from __future__ import annotations

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import ConfigError
from claudeq.worker.tools import SERVER_NAME, ToolRegistry, wire_name


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
