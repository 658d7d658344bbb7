"""Helpers for the simulator's unit tests: an httpx client on the ASGI app, request builders, an SSE parser."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from claudeq.simulator.app import create_app
from claudeq.simulator.service import Simulator

OAUTH = "sk-ant-oat01-unit-test"
API_KEY = "sk-ant-api03-unit-test"

MakeClient = Callable[..., httpx.AsyncClient]


def body(prompt: str | list[dict[str, Any]], stream: Any = True, **extra: Any) -> dict[str, Any]:
    """A Messages request body; `prompt` is the user text or a whole message list."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return {"model": "claude-sonnet-5-5", "max_tokens": 1024, "stream": stream, "messages": messages, **extra}


def auth(token: str = OAUTH, kind: str = "oauth", session: str | None = None) -> dict[str, str]:
    """Headers the CLI would send for a token of that kind."""
    headers = {"authorization": f"Bearer {token}"} if kind == "oauth" else {"x-api-key": token}
    if session:
        headers["x-claude-code-session-id"] = session
    return headers


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of an SSE body; checks each event's data type matches its name."""
    events = []
    for chunk in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.split("\n"))
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


def reply_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    """The concatenated text_delta text of a stream."""
    return "".join(
        d["delta"]["text"] for e, d in events if e == "content_block_delta" and d["delta"]["type"] == "text_delta"
    )


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """Factory: an AsyncClient talking to a fresh simulator app (`config` as for SimConfig)."""
    clients: list[httpx.AsyncClient] = []

    def make(config: dict[str, Any] | None = None) -> httpx.AsyncClient:
        app = create_app(Simulator(config))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
async def client(make_client: MakeClient) -> httpx.AsyncClient:
    """A client on a simulator with no configuration (open: any token is an account)."""
    return make_client()
