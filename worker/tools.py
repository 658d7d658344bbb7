"""Worker-registered in-process MCP tools: loaded from `policy.mcp_tools_module`, offered to jobs by name."""

from __future__ import annotations

import importlib
from typing import Any

from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server
from claude_agent_sdk.types import McpSdkServerConfig

from claudeq.config.settings import Settings
from claudeq.errors import ConfigError

#: The MCP server name jobs' tools are served under; the CLI names them `mcp__claudeq__<tool>`.
SERVER_NAME = "claudeq"


def wire_name(tool: str) -> str:
    """The name the CLI and `allowed_tools` use for a registered tool."""
    return f"mcp__{SERVER_NAME}__{tool}"


class ToolRegistry:
    """The tools this worker can run in-process, by name."""

    def __init__(self, tools: list[SdkMcpTool[Any]] | None = None) -> None:
        self._tools: dict[str, SdkMcpTool[Any]] = {}
        for item in tools or []:
            if not isinstance(item, SdkMcpTool):
                raise ConfigError("CLAUDEQ_POLICY__MCP_TOOLS_MODULE", f"{item!r} is not an SDK @tool")
            if item.name in self._tools:
                raise ConfigError("CLAUDEQ_POLICY__MCP_TOOLS_MODULE", f"tool {item.name!r} is defined twice")
            self._tools[item.name] = item

    @classmethod
    def from_module(cls, module: str) -> ToolRegistry:
        """Import `module` and register its `TOOLS` list; errors say what to fix."""
        field = "CLAUDEQ_POLICY__MCP_TOOLS_MODULE"
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(field, f"cannot import {module!r}: {exc}") from None
        tools = getattr(loaded, "TOOLS", None)
        if not isinstance(tools, list):
            raise ConfigError(field, f"module {module!r} must define TOOLS = [<@tool functions>]")
        return cls(tools)

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolRegistry:
        """The registry the policy names (empty when it names none)."""
        module = settings.policy.mcp_tools_module
        return cls.from_module(module) if module else cls()

    @property
    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def get(self, name: str) -> SdkMcpTool[Any] | None:
        """The tool called `name`, if registered."""
        return self._tools.get(name)

    def unknown(self, names: list[str]) -> list[str]:
        """Those of `names` that are not registered."""
        return [n for n in names if n not in self._tools]

    def server(self, names: list[str]) -> McpSdkServerConfig:
        """An in-process MCP server offering exactly the tools `names` (all must be registered)."""
        missing = self.unknown(names)
        if missing:
            raise KeyError(", ".join(missing))
        return create_sdk_mcp_server(name=SERVER_NAME, tools=[self._tools[n] for n in dict.fromkeys(names)])
