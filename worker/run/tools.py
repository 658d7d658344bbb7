"""Worker-registered in-process MCP tools: loaded from `policy.mcp_tools_module`, offered to jobs by name.

With `policy.fleet_tools`, the fleet tools of `claudeq mcp` (submit_job, wait_job, …) are offered the same way: the
worker serves that very MCP server in-process to the run's CLI, bound to the run's job (its children record it as
their parent). The CLI never sees the Redis URL: the tools run in the worker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server
from claude_agent_sdk.types import McpSdkServerConfig

from claudeq.errors import ConfigError

from ...config.settings import Settings

if TYPE_CHECKING:
    from ...producer.client import Client

#: Tool names of the fleet server (claudeq.producer.mcp_server.FLEET_TOOLS; repeated so that importing this
#: module does not import the server).
FLEET_TOOLS: tuple[str, ...] = ("submit_job", "get_job", "list_jobs", "cancel_job", "wait_job", "accounts")

#: The MCP server name jobs' tools are served under; the CLI names them `mcp__claudeq__<tool>`.
SERVER_NAME = "claudeq"


def wire_name(tool: str) -> str:
    """The name the CLI and `allowed_tools` use for a registered tool."""
    return f"mcp__{SERVER_NAME}__{tool}"


class ToolRegistry:
    """The tools this worker can run in-process, by name."""

    def __init__(self, tools: list[SdkMcpTool[Any]] | None = None, fleet: Settings | None = None) -> None:
        self._tools: dict[str, SdkMcpTool[Any]] = {}
        self._fleet = fleet  # the settings of the fleet the fleet tools submit to, when offered
        self._fleet_client: Client | None = None
        for item in tools or []:
            if not isinstance(item, SdkMcpTool):
                raise ConfigError("CLAUDEQ_POLICY__MCP_TOOLS_MODULE", f"{item!r} is not an SDK @tool")
            if item.name in self._tools:
                raise ConfigError("CLAUDEQ_POLICY__MCP_TOOLS_MODULE", f"tool {item.name!r} is defined twice")
            if fleet is not None and item.name in FLEET_TOOLS:
                raise ConfigError("CLAUDEQ_POLICY__MCP_TOOLS_MODULE", f"tool {item.name!r} is a fleet tool's name")
            self._tools[item.name] = item

    @classmethod
    def from_module(cls, module: str, fleet: Settings | None = None) -> ToolRegistry:
        """Import `module` and register its `TOOLS` list; errors say what to fix."""
        field = "CLAUDEQ_POLICY__MCP_TOOLS_MODULE"
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(field, f"cannot import {module!r}: {exc}") from None
        tools = getattr(loaded, "TOOLS", None)
        if not isinstance(tools, list):
            raise ConfigError(field, f"module {module!r} must define TOOLS = [<@tool functions>]")
        return cls(tools, fleet)

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolRegistry:
        """The registry the policy names (empty when it names none)."""
        module = settings.policy.mcp_tools_module
        fleet = settings if settings.policy.fleet_tools else None
        return cls.from_module(module, fleet) if module else cls(fleet=fleet)

    @property
    def names(self) -> list[str]:
        """Registered tool names (fleet tools included when offered), sorted."""
        return sorted([*self._tools, *(FLEET_TOOLS if self._fleet is not None else ())])

    def mixes_fleet(self, names: list[str]) -> bool:
        """Whether `names` asks for fleet tools and registered tools together (one server cannot serve both)."""
        fleet = [n for n in names if n in FLEET_TOOLS and n not in self._tools]
        return bool(fleet) and len(fleet) < len(names)

    def get(self, name: str) -> SdkMcpTool[Any] | None:
        """The tool called `name`, if registered."""
        return self._tools.get(name)

    def unknown(self, names: list[str]) -> list[str]:
        """Those of `names` that are not registered."""
        fleet = FLEET_TOOLS if self._fleet is not None else ()
        return [n for n in names if n not in self._tools and n not in fleet]

    def server(self, names: list[str], job_id: str | None = None, tenant: str | None = None) -> McpSdkServerConfig:
        """An in-process MCP server offering exactly the tools `names` (all must be registered); fleet tools are
        served by `claudeq mcp`'s server bound to `job_id` (the parent of the jobs it submits) and to the run's
        `tenant` (its jobs are that tenant's; it sees no other tenant's jobs)."""
        missing = self.unknown(names)
        if missing:
            raise KeyError(", ".join(missing))
        if self.mixes_fleet(names):
            raise KeyError("fleet tools and registered tools cannot be combined in one job")
        if any(n in FLEET_TOOLS and n not in self._tools for n in names):
            return McpSdkServerConfig(type="sdk", name=SERVER_NAME, instance=self._fleet_server(names, job_id, tenant))
        return create_sdk_mcp_server(name=SERVER_NAME, tools=[self._tools[n] for n in dict.fromkeys(names)])

    def _fleet_server(self, names: list[str], job_id: str | None, tenant: str | None = None) -> Any:
        from ...producer.client import Client
        from ...producer.mcp_server import build_server

        assert self._fleet is not None
        if self._fleet_client is None:  # one producer client per worker, made on first use
            self._fleet_client = Client(self._fleet)
        server = build_server(self._fleet_client, parent_job_id=job_id, tools=names, tenant=tenant)
        # The SDK serves any low-level `mcp.server.Server` in-process (McpSdkServerConfig.instance).
        return server._lowlevel_server
