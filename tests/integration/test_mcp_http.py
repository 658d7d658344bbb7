"""`claudeq mcp --http HOST:PORT`: the same tools over streamable HTTP (path /mcp)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.support.redis_server import _free_port
from tests.support.worker_proc import settings_env, worker_env

pytestmark = pytest.mark.integration


@pytest.fixture
def http_server(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`claudeq mcp --http 127.0.0.1:PORT` for this test's settings; yields its URL."""
    with _mcp_http({**worker_env(settings, []), **settings_env(settings)}, tmp_path / "mcp-http.log") as url:
        yield url


@contextmanager
def _mcp_http(env: dict[str, str], log: Path) -> Iterator[str]:
    """`claudeq mcp --http` on a free port, with `env`; yields its URL. Another process of the suite may take the
    port between its pick and the bind: then it starts again on another."""
    for _ in range(3):
        port = _free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "claudeq.producer.cli", "mcp", "--http", f"127.0.0.1:{port}"],
                env=env,
                cwd=Path(__file__).resolve().parents[2],
                stdout=subprocess.DEVNULL,
                stderr=out,
            )
        try:
            if _listening(proc, port):
                yield f"http://127.0.0.1:{port}/mcp"
                return
        finally:
            proc.terminate()
            proc.wait(10)
        said = log.read_text(errors="replace")
        assert "address already in use" in said.lower(), f"claudeq mcp --http exited: {said[-2000:]}"
    raise AssertionError("claudeq mcp --http found no free port in three tries")


def _listening(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Wait until `proc` answers on `port` (True) or exits (False)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return True
        except httpx.TransportError:
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, "claudeq mcp --http did not listen"
            time.sleep(0.2)


async def test_http_transport_submits_a_job(http_server: str, client: Client) -> None:
    async with McpClient(http_server) as mcp:
        assert "wait_job" in [t.name for t in (await mcp.list_tools()).tools]
        done = await mcp.call_tool("submit_job", {"prompt": "over http"})
        assert done.structured_content is not None
        assert client.get(done.structured_content["id"]).spec.prompt == "over http"


def test_a_bad_address_is_refused(settings: Settings) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", "mcp", "--http", "nowhere"],
        env={**worker_env(settings, []), **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "--http" in run.stderr


TOKENS = {"CQT_MCP_TOKEN_A": "token-of-team-a-7f3e", "CQT_MCP_TOKEN_B": "token-of-team-b-91c2"}


@pytest.fixture
def token_server(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Client]]:
    """`claudeq mcp --http` with two tenants mapped by bearer tokens; yields its URL and a client of the fleet."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "team-a"\nmcp_token_env = "CQT_MCP_TOKEN_A"\n\n'
        '[[tenants]]\nname = "team-b"\nmcp_token_env = "CQT_MCP_TOKEN_B"\n'
    )
    accounts = tmp_path / "accounts.toml"
    accounts.write_text('[[accounts]]\nname = "acct-secret-name"\nkind = "api_key"\ntoken_env = "CQT_UNUSED_KEY"\n')
    fleet = settings.model_copy(update={"tenants_file": tenants, "accounts_file": accounts})
    client = Client(fleet)
    try:
        with _mcp_http({**worker_env(fleet, []), **settings_env(fleet), **TOKENS}, tmp_path / "mcp-http.log") as url:
            yield url, client
    finally:
        client.close()


@asynccontextmanager
async def as_caller(url: str, token: str | None) -> AsyncIterator[McpClient]:
    """An MCP client session sending `Authorization: Bearer <token>` (none without a token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        McpClient(streamable_http_client(url, http_client=http)) as mcp,
    ):
        yield mcp


async def test_a_bearer_token_decides_the_tenant_and_what_the_caller_sees(token_server: tuple[str, Client]) -> None:
    url, client = token_server
    async with as_caller(url, None) as anonymous:
        refused = await anonymous.call_tool("submit_job", {"prompt": "who am I"})
        assert refused.is_error and "authorization" in refused.content[0].text  # type: ignore[union-attr]
    async with as_caller(url, "not-a-token") as stranger:
        refused = await stranger.call_tool("list_jobs", {})
        assert refused.is_error and "authorization" in refused.content[0].text  # type: ignore[union-attr]
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        done = await team_a.call_tool("submit_job", {"prompt": "for team a"})
        assert not done.is_error and done.structured_content is not None
        a_job = done.structured_content["id"]
        assert client.get(a_job).spec.tenant == "team-a"
        other = await team_a.call_tool("submit_job", {"prompt": "pretend", "tenant": "team-b"})
        assert other.is_error and "tenant" in other.content[0].text  # type: ignore[union-attr]
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_B"]) as team_b:
        hidden = await team_b.call_tool("get_job", {"job_id": a_job})
        assert hidden.is_error and "no job" in hidden.content[0].text  # type: ignore[union-attr]
        cancel = await team_b.call_tool("cancel_job", {"job_id": a_job})
        assert cancel.is_error
        listed = await team_b.call_tool("list_jobs", {})
        assert listed.structured_content == {"jobs": []}
    assert client.get(a_job).status == "queued"  # team b could not cancel it


async def test_the_accounts_tool_needs_a_bearer_token_like_every_other_tool(
    token_server: tuple[str, Client],
) -> None:
    """Names, states, slots and cooldowns of the fleet's accounts are no more public than a tenant's jobs: with tenant
    tokens configured, `accounts` without a token or with a wrong one is refused as the other tools are."""
    url, _ = token_server
    for token in (None, "not-a-token"):
        async with as_caller(url, token) as caller:
            for tool, arguments in (("accounts", {}), ("list_jobs", {})):
                refused = await caller.call_tool(tool, arguments)
                assert refused.is_error, (tool, token, refused.structured_content)
                text = refused.content[0].text  # type: ignore[union-attr]
                assert "authorization" in text and "acct-secret-name" not in text
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        listed = await team_a.call_tool("accounts", {})
        assert not listed.is_error and listed.structured_content is not None
        assert [a["name"] for a in listed.structured_content["accounts"]] == ["acct-secret-name"]


async def test_a_bound_listing_reads_the_tenants_own_index_whatever_others_submit(
    token_server: tuple[str, Client],
) -> None:
    url, client = token_server
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        done = await team_a.call_tool("submit_job", {"prompt": "a's own"})
        assert done.structured_content is not None
        a_job = done.structured_content["id"]
        child = client.submit(prompt="a's child", tenant="team-a", metadata={"parent_job_id": a_job})
        # Another tenant submits more than any window of the fleet's newest jobs would hold.
        client.submit_many([{"prompt": f"b's {i}", "tenant": "team-b"} for i in range(600)])
        listed = await team_a.call_tool("list_jobs", {"limit": 50})
        assert listed.structured_content is not None
        assert [j["id"] for j in listed.structured_content["jobs"]] == [child.id, a_job]
        queued = await team_a.call_tool("list_jobs", {"status": "queued"})
        assert queued.structured_content is not None and len(queued.structured_content["jobs"]) == 2
        children = await team_a.call_tool("list_jobs", {"parent_job_id": a_job})
        assert children.structured_content is not None
        assert [j["id"] for j in children.structured_content["jobs"]] == [child.id]
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_B"]) as team_b:
        listed = await team_b.call_tool("list_jobs", {"limit": 200})
        assert listed.structured_content is not None
        jobs = listed.structured_content["jobs"]
        assert len(jobs) == 200 and all(j["spec"]["tenant"] == "team-b" for j in jobs)
        none = await team_b.call_tool("list_jobs", {"parent_job_id": a_job})
        assert none.structured_content == {"jobs": []}


async def test_an_idempotency_key_over_mcp_is_the_callers_tenants_own(token_server: tuple[str, Client]) -> None:
    url, client = token_server
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        first = await team_a.call_tool("submit_job", {"prompt": "a's", "idempotency_key": "nightly"})
        assert first.structured_content is not None
        a_job = first.structured_content["id"]
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_B"]) as team_b:
        same_key = await team_b.call_tool("submit_job", {"prompt": "b's", "idempotency_key": "nightly"})
        assert not same_key.is_error, same_key.content
        assert same_key.structured_content is not None and same_key.structured_content["created"] is True
        assert same_key.structured_content["id"] != a_job and a_job not in str(same_key.content)
    assert client.get(same_key.structured_content["id"]).spec.tenant == "team-b"


async def test_schedules_over_mcp_are_the_callers_tenants_own(token_server: tuple[str, Client]) -> None:
    url, client = token_server
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        added = await team_a.call_tool(
            "add_schedule", {"name": "nightly", "prompt": "review", "cron": "0 2 * * *", "spec": {"max_turns": 3}}
        )
        assert not added.is_error and added.structured_content is not None, added.content
        assert added.structured_content["spec"]["tenant"] == "team-a"
        bad = await team_a.call_tool("add_schedule", {"name": "x", "prompt": "p", "cron": "not cron"})
        assert bad.is_error and "cron" in bad.content[0].text  # type: ignore[union-attr]
        other = await team_a.call_tool("add_schedule", {"name": "y", "prompt": "p", "every_s": 60, "tenant": "team-b"})
        assert other.is_error and "tenant" in other.content[0].text  # type: ignore[union-attr]
        paused = await team_a.call_tool("pause_schedule", {"name": "nightly"})
        assert not paused.is_error
    [info] = client.schedules("team-a")
    assert info.schedule.paused and info.schedule.spec.max_turns == 3
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_B"]) as team_b:
        listed = await team_b.call_tool("list_schedules", {})
        assert listed.structured_content == {"schedules": []}
        hidden = await team_b.call_tool("remove_schedule", {"name": "nightly"})
        assert hidden.is_error and "nightly" in hidden.content[0].text  # type: ignore[union-attr]
    async with as_caller(url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
        listed = await team_a.call_tool("list_schedules", {})
        assert listed.structured_content is not None
        assert [s["schedule"]["name"] for s in listed.structured_content["schedules"]] == ["nightly"]
        assert not (await team_a.call_tool("remove_schedule", {"name": "nightly"})).is_error
    assert client.schedules("team-a") == []
