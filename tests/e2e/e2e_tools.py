"""Worker-registered MCP tools for the end-to-end tests (CLAUDEQ_POLICY__MCP_TOOLS_MODULE=tests.e2e.e2e_tools)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from claude_agent_sdk import tool

#: The modules whose files `where` reports: the package root and one module of each room.
WHERE_MODULES = ("claudeq", "claudeq.worker.delivery.engine", "claudeq.producer.client", "claudeq.config.settings")


@tool("add", "Add two integers", {"a": int, "b": int})
async def add(args: dict[str, Any]) -> dict[str, Any]:
    """Add a and b; the reply names the process that ran it."""
    return {"content": [{"type": "text", "text": f"sum={args['a'] + args['b']} pid={os.getpid()}"}]}


@tool("where", "Report the files the worker process imported claudeq from", {})
async def where(args: dict[str, Any]) -> dict[str, Any]:
    """`where=<JSON>`: the files of WHERE_MODULES and the folders every other loaded claudeq module came from."""
    files = {name: getattr(sys.modules.get(name), "__file__", None) for name in WHERE_MODULES}
    loaded = [getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n.startswith("claudeq.")]
    folders = sorted({os.path.dirname(f) for f in loaded if f})
    return {"content": [{"type": "text", "text": "where=" + json.dumps({"files": files, "folders": folders})}]}


TOOLS = [add, where]
