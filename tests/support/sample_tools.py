"""MCP tools for tests: `add` (pure) and `whoami` (proves it ran in the worker process; logs calls to a file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from claude_agent_sdk import tool

#: When set, each `whoami` call appends "<pid>\n" to this file.
CALL_LOG_VAR = "CLAUDEQ_TEST_TOOL_LOG"


@tool("add", "Add two integers", {"a": int, "b": int})
async def add(args: dict[str, Any]) -> dict[str, Any]:
    """Return `sum=<a+b>`."""
    return {"content": [{"type": "text", "text": f"sum={int(args['a']) + int(args['b'])}"}]}


@tool("whoami", "Report the process id of the process running this tool", {})
async def whoami(args: dict[str, Any]) -> dict[str, Any]:
    """Return `pid=<pid>` and log the call."""
    _log_call(os.environ.get(CALL_LOG_VAR))
    return {"content": [{"type": "text", "text": f"pid={os.getpid()}"}]}


def _log_call(path: str | None) -> None:
    if path:
        with Path(path).open("a") as fh:
            fh.write(f"{os.getpid()}\n")


TOOLS = [add, whoami]
