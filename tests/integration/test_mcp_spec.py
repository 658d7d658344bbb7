"""`claudeq mcp`'s submit_job takes the whole job spec, typed, and refuses what it does not know:
a typo is an error naming it, never a job holding only the prompt. Real MCP client and server, real Redis."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client as McpClient

from claudeq.models import JobSpec
from claudeq.producer.client import Client
from claudeq.producer.mcp_server import build_server

pytestmark = pytest.mark.integration


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_submit_job_refuses_an_unknown_field_naming_it(client: Client) -> None:
    async with McpClient(build_server(client)) as mcp:
        bad = await mcp.call_tool("submit_job", {"prompt": "p", "max_turn": 3})
        assert bad.is_error and "max_turn" in text_of(bad)
        bad = await mcp.call_tool("list_jobs", {"limt": 3})
        assert bad.is_error and "limt" in text_of(bad)
    assert client.list(limit=10) == []  # nothing submitted


async def test_submit_job_takes_every_field_of_the_spec(client: Client) -> None:
    async with McpClient(build_server(client)) as mcp:
        [tool] = [t for t in (await mcp.list_tools()).tools if t.name == "submit_job"]
        assert set(tool.input_schema["properties"]) == set(JobSpec.model_fields)
        assert tool.input_schema.get("additionalProperties") is False
        args = {
            "prompt": "p",
            "max_turns": 3,
            "effort": "low",
            "priority": 4,
            "deadline_s": 30,
            "fallback_model": "haiku",
            "on_missing_session": "restart",
        }
        ok = await mcp.call_tool("submit_job", args)
        assert not ok.is_error, text_of(ok)
        assert ok.structured_content is not None
        spec = client.get(ok.structured_content["id"]).spec
        assert (spec.max_turns, spec.effort, spec.priority, spec.deadline_s) == (3, "low", 4, 30)
        assert (spec.fallback_model, spec.on_missing_session) == ("haiku", "restart")
        bad = await mcp.call_tool("submit_job", {"prompt": "p", "cwd": "/etc"})
        assert bad.is_error and "cwd" in text_of(bad)
