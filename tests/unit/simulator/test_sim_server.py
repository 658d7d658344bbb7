"""The simulator behind a real socket: timing (stall, latency), dropped and abandoned streams, concurrency,
and the process entry point."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from claudeq.simulator.__main__ import parse_accounts
from claudeq.simulator.config import load_config
from claudeq.simulator.testing import SimulatorServer, start_simulator_process
from tests.unit.simulator.conftest import auth, body


@pytest.fixture
def server() -> Iterator[SimulatorServer]:
    with SimulatorServer({"accounts": [{"name": "a", "token": "tok-a"}]}) as sim:
        yield sim


async def test_stall_sends_message_start_then_goes_silent(server: SimulatorServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10) as client:
        started = time.monotonic()
        request = body("wait [[sim: stall 1.5]]")
        async with client.stream("POST", "/v1/messages", json=request, headers=auth("tok-a")) as response:
            chunks = response.aiter_text()
            first = await anext(chunks)
            assert "event: message_start" in first
            assert time.monotonic() - started < 1.0
            assert server.stats()["accounts"]["a"]["in_flight"] == 1
            rest = "".join([chunk async for chunk in chunks])
        assert time.monotonic() - started >= 1.5
        assert "message_stop" in rest
    stats = server.stats()["accounts"]["a"]
    assert stats["stalls_injected"] == 1 and stats["in_flight"] == 0
    entry = server.requests()[-1]
    assert entry["stall_s"] == 1.5
    # The log spans the request from arrival to the end of its answer (how overlapping runs are seen).
    assert entry["ended"] - entry["time"] >= 1.5


async def test_client_leaving_during_a_stall_ends_the_request(server: SimulatorServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10) as client:
        request = body("wait [[sim: stall 30]]")
        async with client.stream("POST", "/v1/messages", json=request, headers=auth("tok-a")) as response:
            assert "message_start" in await anext(response.aiter_text())
    for _ in range(100):
        if server.stats()["accounts"]["a"]["in_flight"] == 0:
            break
        await asyncio.sleep(0.05)
    assert server.stats()["accounts"]["a"]["in_flight"] == 0
    entry = server.requests()[-1]
    assert entry["outcome"] == "disconnected"
    assert entry["time"] <= entry["ended"] < entry["time"] + 25  # ended when the client left, not after the stall
    # Input was billed with message_start; no output was ever sent.
    assert server.stats()["accounts"]["a"]["tokens"]["output"] == 0


async def test_drop_cuts_the_stream_mid_way(server: SimulatorServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10) as client:
        request = body("long [[sim: drop]] [[sim: tokens out=200]]")
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", "/v1/messages", json=request, headers=auth("tok-a")) as response:
                "".join([chunk async for chunk in response.aiter_text()])
        # The connection after a drop is gone, but the server is fine.
        ok = await client.post("/v1/messages", json=body("after"), headers=auth("tok-a"))
        assert ok.status_code == 200
    stats = server.stats()["accounts"]["a"]
    assert (stats["drops_injected"], stats["errors_injected"]) == (1, 1)
    assert server.requests()[-2]["outcome"] == "dropped"


async def test_latency_model_spaces_out_the_stream() -> None:
    config = {"latency": {"ttft_s": 0.3, "tokens_per_s": 400}}
    with SimulatorServer(config) as sim:
        async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=10) as client:
            started = time.monotonic()
            response = await client.post("/v1/messages", json=body("x [[sim: tokens out=200]]"), headers=auth())
            elapsed = time.monotonic() - started
    assert response.status_code == 200
    # 0.3 s to the first token, then 200 tokens at 400/s.
    assert 0.75 <= elapsed < 3


async def test_in_flight_counts_concurrent_streams(server: SimulatorServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10) as client:
        requests = [
            client.post("/v1/messages", json=body(f"c{i} [[sim: stall 0.5]]"), headers=auth("tok-a")) for i in range(5)
        ]
        responses = await asyncio.gather(*requests)
    assert all(r.status_code == 200 for r in responses)
    stats = server.stats()["accounts"]["a"]
    assert stats["max_in_flight"] == 5 and stats["in_flight"] == 0


async def test_delay_directive_holds_the_headers(server: SimulatorServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10) as client:
        started = time.monotonic()
        response = await client.post(
            "/v1/messages", json=body("x [[sim: delay 0.4]]", stream=False), headers=auth("tok-a")
        )
    assert response.status_code == 200 and time.monotonic() - started >= 0.4


def test_server_helpers_reset_and_configure(server: SimulatorServer) -> None:
    with httpx.Client(base_url=server.base_url, trust_env=False) as client:
        client.post("/v1/messages", json=body("x"), headers=auth("tok-a"))
    assert server.stats()["accounts"]["a"]["requests"] == 1
    assert len(server.requests(limit=5)) == 1
    server.reset()
    assert server.stats()["totals"]["requests"] == 0
    new = server.configure({"faults": {"p_500": 0.5}})
    assert new["faults"]["p_500"] == 0.5
    with pytest.raises(ValueError, match="p_500"):
        server.configure({"faults": {"p_500": 2}})


def test_toml_config_and_accounts_flag(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text(
        """
seed = 5
[faults]
p_529 = 0.1
[latency.models."claude-opus-5-5"]
tokens_per_s = 30
[[accounts]]
name = "team"
token = "tok-team"
kind = "api_key"
[[accounts.windows]]
family = "7d"
length_s = 600
tokens = 5000
warn_at = 0.75
"""
    )
    config = load_config(path)
    assert config.seed == 5 and config.faults.p_529 == 0.1
    assert config.latency.models["claude-opus-5-5"].tokens_per_s == 30
    assert config.accounts[0].windows[0].tokens == 5000
    assert "tok-team" not in repr(config)
    assert parse_accounts("a=tok1, b=tok2:api_key") == [
        {"name": "a", "token": "tok1", "kind": "oauth"},
        {"name": "b", "token": "tok2", "kind": "api_key"},
    ]
    with pytest.raises(ValueError, match="name=token"):
        parse_accounts("justatoken")


def test_process_starts_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text('[[accounts]]\nname = "p"\ntoken = "tok-p"\n')
    proc, base_url = start_simulator_process(path, ["--accounts", "q=tok-q:api_key"])
    try:
        with httpx.Client(base_url=base_url, trust_env=False, timeout=10) as client:
            assert client.post("/v1/messages", json=body("x"), headers=auth("tok-q", "api_key")).status_code == 200
            assert client.post("/v1/messages", json=body("x"), headers=auth("tok-nope")).status_code == 401
            assert set(client.get("/_sim/stats").json()["accounts"]) == {"q"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_process_refuses_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[faults]\np_529 = 7\n")
    with pytest.raises(RuntimeError, match="exited with code 2"):
        start_simulator_process(path)
