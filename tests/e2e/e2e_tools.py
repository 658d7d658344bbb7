"""A worker-registered MCP tool for the end-to-end tests (CLAUDEQ_POLICY__MCP_TOOLS_MODULE=tests.e2e.e2e_tools)."""

from __future__ import annotations

import os
from typing import Any

from claude_agent_sdk import tool


@tool("add", "Add two integers", {"a": int, "b": int})
async def add(args: dict[str, Any]) -> dict[str, Any]:
    """Add a and b; the reply names the process that ran it."""
    return {"content": [{"type": "text", "text": f"sum={args['a'] + args['b']} pid={os.getpid()}"}]}


TOOLS = [add]
