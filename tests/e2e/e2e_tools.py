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
    """`where=<JSON>`: the files of WHERE_MODULES, and the folders on sys.path every loaded claudeq module came from.

    A module `claudeq.a.b` in `<root>/claudeq/a/b.py` came from `<root>`: one folder whatever the number of modules
    and however long the checkout's path, so the reply stays far inside the event's text limit."""
    files = {name: getattr(sys.modules.get(name), "__file__", None) for name in WHERE_MODULES}
    roots: set[str] = set()
    loaded = 0
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not (name == "claudeq" or name.startswith("claudeq.")) or not file:
            continue
        loaded += 1
        path = os.path.dirname(file) if os.path.basename(file) == "__init__.py" else file
        for _ in name.split("."):
            path = os.path.dirname(path)
        roots.add(path)
    reply = {"files": files, "roots": sorted(roots), "modules": loaded}
    return {"content": [{"type": "text", "text": "where=" + json.dumps(reply)}]}


TOOLS = [add, where]
