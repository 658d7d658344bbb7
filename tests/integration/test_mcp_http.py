"""`claudeq mcp --http HOST:PORT`: the same tools over streamable HTTP (path /mcp)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client as McpClient

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.support.redis_server import _free_port
from tests.support.worker_proc import settings_env, worker_env

pytestmark = pytest.mark.integration


@pytest.fixture
def http_server(settings: Settings) -> Iterator[str]:
    """`claudeq mcp --http 127.0.0.1:PORT` for this test's settings; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", "mcp", "--http", f"127.0.0.1:{port}"],
        env={**worker_env(settings, []), **settings_env(settings)},
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, "claudeq mcp --http exited"
                assert time.monotonic() < deadline, "claudeq mcp --http did not listen"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


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
