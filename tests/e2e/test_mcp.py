"""`claudeq mcp` end to end.

1. The `mcp` stdio client against `claudeq mcp` as a subprocess: list the tools, submit a job and `wait_job` it to
   a succeeded record from a real worker; an invalid argument is a tool error naming the field; `wait_job` with a
   short timeout returns the running record, with progress notifications seen.
2. The real CLI as the MCP client: a job whose run calls `mcp__claudeq__submit_job` (steered by a simulator tool
   directive) enqueues a child job that a worker runs and whose record links its parent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import settings_env

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def stdio_server(settings: Settings) -> StdioServerParameters:
    """`claudeq mcp` over stdio, configured for this test's fleet."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "claudeq.producer.cli", "mcp"], env=settings_env(settings), cwd=REPO
    )


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_stdio_client_lists_submits_waits_and_gets_field_errors(
    settings: Settings, workers: WorkerFactory, client: Client, unique: str
) -> None:
    workers()
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with McpClient(stdio_server(settings), read_timeout_seconds=60) as mcp:
        names = [t.name for t in (await mcp.list_tools()).tools]
        assert names == [
            *("submit_job", "get_job", "list_jobs", "cancel_job", "wait_job", "accounts"),
            *("add_schedule", "list_schedules", "pause_schedule", "resume_schedule", "remove_schedule"),
            *("list_approvals", "decide_approval"),
        ]

        bad = await mcp.call_tool("submit_job", {"prompt": "x", "max_turns": 0})
        assert bad.is_error and "max_turns" in text_of(bad), text_of(bad)
        bad = await mcp.call_tool("submit_job", {"prompt": "x", "tools": "no-such-profile"})
        assert bad.is_error and "tools" in text_of(bad), text_of(bad)
        bad = await mcp.call_tool("wait_job", {"job_id": "nope", "timeout_s": 5000})
        assert bad.is_error and "timeout_s" in text_of(bad), text_of(bad)
        assert client.list() == [], "a refused submit wrote nothing"

        submitted = await mcp.call_tool("submit_job", {"prompt": f'[[sim: text "answer-{unique}"]] hello'})
        assert not submitted.is_error, text_of(submitted)
        job = submitted.structured_content
        assert job is not None and job["created"] is True and job["status"] in ("queued", "running", "succeeded")
        done = await mcp.call_tool("wait_job", {"job_id": job["id"], "timeout_s": 60}, progress_callback=on_progress)
        record = done.structured_content
        assert record is not None and record["status"] == "succeeded", record
        assert f"answer-{unique}" in record["result"]["text"]
        assert record == client.get(job["id"]).public()
        messages = [m for _, m in progress]
        assert f"assistant: answer-{unique}" in messages and messages[-1] == "succeeded", messages
        assert [v for v, _ in progress] == sorted(v for v, _ in progress)

        got = await mcp.call_tool("get_job", {"job_id": job["id"]})
        assert got.structured_content == record
        missing = await mcp.call_tool("get_job", {"job_id": "no-such-job"})
        assert missing.is_error and "job_id" in text_of(missing)
        listed = await mcp.call_tool("list_jobs", {"status": "succeeded"})
        assert listed.structured_content is not None
        assert [j["id"] for j in listed.structured_content["jobs"]] == [job["id"]]
        accounts = await mcp.call_tool("accounts", {})
        assert accounts.structured_content is not None
        assert sorted(a["name"] for a in accounts.structured_content["accounts"]) == ["a", "b"]
        assert "sk-ant" not in json.dumps(accounts.structured_content)

        # A short wait on a stalled run: the running record comes back when the timeout passes, with progress.
        progress.clear()
        slow = (await mcp.call_tool("submit_job", {"prompt": f"[[sim: stall 60]] slow {unique}"})).structured_content
        assert slow is not None
        early = await mcp.call_tool("wait_job", {"job_id": slow["id"], "timeout_s": 4}, progress_callback=on_progress)
        assert early.structured_content is not None and early.structured_content["status"] == "running"
        assert progress, "no progress notification while waiting"
        cancelled = await mcp.call_tool("cancel_job", {"job_id": slow["id"]})
        assert cancelled.structured_content == {"id": slow["id"], "result": "running"}
        final = await mcp.call_tool("wait_job", {"job_id": slow["id"], "timeout_s": 30})
        assert final.structured_content is not None and final.structured_content["status"] == "cancelled"


def test_a_run_submits_a_child_job_through_the_fleet_tools_and_the_child_links_its_parent(
    settings: Settings, workers: WorkerFactory, client: Client, unique: str
) -> None:
    policy = settings.policy.model_copy(update={"fleet_tools": True})
    workers(policy=policy)
    child_prompt = f"child work {unique}"
    call = json.dumps({"prompt": child_prompt, "metadata": {"parent_job_id": "forged"}})
    parent = client.submit(
        prompt=f"[[sim: tool mcp__claudeq__submit_job {call}]] hand this off {unique}", mcp_tools=["submit_job"]
    )
    record = client.wait(parent.id, timeout=90, poll_s=0.1)
    assert record.status == "succeeded", record.error
    calls = [e for e in client.events(parent.id) if e.type == "tool_call"]
    results = [e for e in client.events(parent.id) if e.type == "tool_result"]
    assert calls and calls[0].data["tool"] == "mcp__claudeq__submit_job"
    assert results and not results[0].data["is_error"], results

    def child_record() -> Any:
        kids = [r for r in client.list() if not isinstance(r, Exception) and r.id != parent.id]
        return kids[0] if kids else None

    child = run_until(child_record, 30, what="the child job")
    assert child.id in results[0].data["text"]
    assert child.spec.prompt == child_prompt
    assert child.parent_job_id == parent.id  # the run cannot claim another parent
    assert child.public()["spec"]["metadata"] == {"parent_job_id": parent.id}
    finished = client.wait(child.id, timeout=60, poll_s=0.1)
    assert finished.status == "succeeded", finished.error
    assert finished.worker and finished.result is not None and child_prompt in (finished.result.text or "")
