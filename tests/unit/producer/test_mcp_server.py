"""`claudeq mcp`: the tool surface, argument errors naming the field, the parent link; `mcp` is imported lazily."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import fakeredis
import pytest
from mcp import Client as McpClient

from claudeq.config.settings import Settings
from claudeq.models import PARENT_JOB_KEY, Event
from claudeq.producer.client import Client
from claudeq.producer.mcp_server import FLEET_TOOLS, build_server, parse_address
from claudeq.worker.run import tools
from claudeq.worker.store.job_store import JobWrite, make_worker_store
from tests.support.aio import run


class _NoCelery:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_task(self, name: str, args: list[str], **kwargs: object) -> None:
        self.sent.append(args[0])


@pytest.fixture
def fleet(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> Client:
    return Client(fake_settings, redis_client=fake_redis, celery_app=_NoCelery())


def test_the_worker_knows_the_same_tool_names() -> None:
    assert tools.FLEET_TOOLS == FLEET_TOOLS


def test_importing_the_client_or_the_cli_does_not_import_the_mcp_server() -> None:
    code = (
        "import sys, claudeq.producer.client as c; assert 'mcp' not in sys.modules, 'client'\n"
        "import claudeq.producer.cli; assert 'claudeq.producer.mcp_server' not in sys.modules, 'cli'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_submit_records_the_bound_parent_and_refuses_bad_fields(fleet: Client) -> None:
    async with McpClient(build_server(fleet, parent_job_id="p-1")) as mcp:
        ok = await mcp.call_tool("submit_job", {"prompt": "hi", "metadata": {PARENT_JOB_KEY: "forged", "k": 1}})
        assert not ok.is_error and ok.structured_content is not None
        record = fleet.get(ok.structured_content["id"])
        assert record.parent_job_id == "p-1" and record.spec.metadata == {PARENT_JOB_KEY: "p-1", "k": 1}
        for args, field in (
            ({"prompt": "x", "max_turns": 0}, "max_turns"),
            ({"prompt": "x", "output_schema": {"type": "array"}}, "output_schema"),
            ({"prompt": "x", "priority": 12}, "priority"),
            ({"prompt": " "}, "prompt"),
            ({"prompt": "x", "workspace": {"repo": "/nowhere/repo"}}, "workspace.repo"),
            ({"prompt": "x", "concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit"),
        ):
            bad = await mcp.call_tool("submit_job", args)
            assert bad.is_error and field in bad.content[0].text, bad.content  # type: ignore[union-attr]
        children = await mcp.call_tool("list_jobs", {"parent_job_id": "p-1"})
        assert children.structured_content is not None
        assert [j["id"] for j in children.structured_content["jobs"]] == [record.id]
        none = await mcp.call_tool("list_jobs", {"parent_job_id": "other"})
        assert none.structured_content == {"jobs": []}


async def test_a_server_offers_only_the_tools_asked_for(fleet: Client) -> None:
    async with McpClient(build_server(fleet, tools=["get_job"])) as mcp:
        assert [t.name for t in (await mcp.list_tools()).tools] == ["get_job"]
    with pytest.raises(ValueError, match="nope"):
        build_server(fleet, tools=["nope"])


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("8765", "host:", "host:99999", ":80"):
        with pytest.raises(ValueError):
            parse_address(bad)


async def test_a_server_bound_to_a_tenant_submits_and_sees_only_that_tenants_jobs(fleet: Client) -> None:
    other = fleet.submit(prompt="someone else's", tenant="team-b")
    async with McpClient(build_server(fleet, parent_job_id="p-1", tenant="team-a")) as mcp:
        ok = await mcp.call_tool("submit_job", {"prompt": "mine"})
        assert not ok.is_error and ok.structured_content is not None
        assert fleet.get(ok.structured_content["id"]).spec.tenant == "team-a"
        forged = await mcp.call_tool("submit_job", {"prompt": "theirs", "tenant": "team-b"})
        assert forged.is_error and "tenant" in forged.content[0].text  # type: ignore[union-attr]
        for tool in ("get_job", "cancel_job", "wait_job"):
            args = {"job_id": other.id, **({"timeout_s": 0} if tool == "wait_job" else {})}
            hidden = await mcp.call_tool(tool, args)
            assert hidden.is_error and "no job" in hidden.content[0].text, tool  # type: ignore[union-attr]
        listed = await mcp.call_tool("list_jobs", {})
        assert listed.structured_content is not None
        assert [j["id"] for j in listed.structured_content["jobs"]] == [ok.structured_content["id"]]
    assert fleet.get(other.id).status == "queued"


async def test_wait_job_reports_the_terminal_event_of_a_job_that_finishes_between_its_reads(
    fleet: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's terminal write lands just after wait_job read the events: the last progress message is still
    the terminal one (the write moves it into the record with the status in one step)."""
    worker = make_worker_store(fleet.settings, fleet.store.redis)
    job = fleet.submit(prompt="hi")
    claim = await worker.send(worker.claim_call(job.id, "w-1", 30))
    assert claim.ok
    await worker.send(
        worker.write_call(JobWrite(job.id, claim.fence, events=[Event(type="run_started", data={"account": "a"})]))
    )
    read = fleet.store.read_events
    finished: list[bool] = []

    def read_then_finish(job_id: str, after: str = "0-0", **kwargs: Any) -> list[tuple[str, Event]]:
        out = read(job_id, after, **kwargs)
        if not finished:
            finished.append(True)
            assert run(
                worker.send(
                    worker.write_call(JobWrite(job.id, claim.fence, "succeeded", events=[Event(type="succeeded")]))
                )
            )
        return out

    monkeypatch.setattr(fleet.store, "read_events", read_then_finish)
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async with McpClient(build_server(fleet)) as mcp:
        done = await mcp.call_tool("wait_job", {"job_id": job.id, "timeout_s": 10}, progress_callback=on_progress)
    assert done.structured_content is not None and done.structured_content["status"] == "succeeded"
    assert progress and progress[-1] == "succeeded", progress


async def test_jobs_an_agent_hands_to_the_fleet_tools_run_and_report_to_it(claudeq_fleet: Any) -> None:
    """The fleet tools on claudeq.testing's fleet (docs/testing.md): the children an agent submits through the real
    MCP server run on the in-process worker, are listed under their parent, and wait_job reports their end."""
    claudeq_fleet.reply(r"^part", text="part done")
    claudeq_fleet.reply(r"^plan", text="planned")
    parent = claudeq_fleet.client.submit(prompt="plan the work")
    async with McpClient(build_server(claudeq_fleet.client, parent_job_id=parent.id)) as mcp:
        for part in ("a", "b"):
            submitted = await mcp.call_tool("submit_job", {"prompt": f"part {part}"})
            assert not submitted.is_error, submitted.content
        await asyncio.to_thread(claudeq_fleet.run_until_idle)
        listed = await mcp.call_tool("list_jobs", {"parent_job_id": parent.id})
        assert listed.structured_content is not None
        children = listed.structured_content["jobs"]
        assert sorted(j["status"] for j in children) == ["succeeded", "succeeded"]
        done = await mcp.call_tool("wait_job", {"job_id": children[0]["id"], "timeout_s": 1})
        assert done.structured_content is not None and done.structured_content["status"] == "succeeded"
    assert claudeq_fleet.record(parent.id).status == "succeeded"
    assert {r.spec.prompt for r in claudeq_fleet.submitted()} == {"plan the work", "part a", "part b"}
