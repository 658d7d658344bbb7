"""The worker-registered tool of `make demo` (CLAUDEQ_POLICY__MCP_TOOLS_MODULE=demo_tools, with ops/ on the path).

A fleet registers its own tools the same way: a module with `TOOLS = [<SDK @tool functions>]`; jobs ask for them
by name (`mcp_tools=["order_status"]`) and the run sees them as `mcp__claudeq__order_status`.
"""

from __future__ import annotations

import os
from typing import Any

from claude_agent_sdk import tool

ORDERS = {"A-1042": "shipped on Monday, arriving Thursday", "B-7": "waiting for stock"}


@tool("order_status", "Look an order up in the shop's database", {"order": str})
async def order_status(args: dict[str, Any]) -> dict[str, Any]:
    """The status of an order; runs inside the worker process (its pid says so)."""
    status = ORDERS.get(str(args.get("order")), "unknown order")
    return {"content": [{"type": "text", "text": f"order {args.get('order')}: {status} (worker pid {os.getpid()})"}]}


TOOLS = [order_status]
