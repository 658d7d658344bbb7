"""Hostile or extreme input and a long-running simulator: no hang, no 500, no unbounded memory."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

import claudeq.simulator.accounts as accounts_module
import claudeq.simulator.service as service_module
from claudeq.simulator.accounts import UNIFIED, Account, AccountRegistry, Window
from claudeq.simulator.config import SimConfig, WindowConfig
from claudeq.simulator.directives import DirectiveError, parse_directives
from claudeq.simulator.replies import _pad_to_tokens
from claudeq.simulator.stats import SESSION_LIMIT, Stats
from tests.unit.simulator.conftest import MakeClient, auth, body

NOW = 1_800_000_000.0


# --- 1. padding -------------------------------------------------------------------------------------------


def test_padding_is_linear_and_exact() -> None:
    started = time.monotonic()
    text = _pad_to_tokens("hello", 50_000)
    assert time.monotonic() - started < 0.5
    assert len(text) == 200_000
    assert text.startswith("hello the simulated model keeps talking")
    assert _pad_to_tokens("long enough", 1) == "long enough"


@pytest.mark.parametrize("directive", ["tokens out=1000001", "tokens in=1000001"])
def test_token_counts_are_capped(directive: str) -> None:
    with pytest.raises(DirectiveError, match="at most 1000000"):
        parse_directives(f"[[sim: {directive}]]")


async def test_tokens_out_beyond_max_tokens_is_a_400(client: httpx.AsyncClient) -> None:
    started = time.monotonic()
    response = await client.post("/v1/messages", json=body("x [[sim: tokens out=32000]]"), headers=auth())
    assert time.monotonic() - started < 1
    assert response.status_code == 400
    assert "max_tokens (1024)" in response.json()["error"]["message"]


# --- 2. non-finite numbers in directives --------------------------------------------------------------------


@pytest.mark.parametrize(
    "directive",
    [
        "stall nan",
        "delay inf",
        "delay 1e400",
        "error 1e400",
        "error nan",
        "tokens out=inf",
        "drop times=nan",
        "error 500 after=inf",
        'tool t {"a": NaN}',
        'tool t {"a": Infinity}',
        'structured {"x": 1e400}',
    ],
)
def test_non_finite_numbers_are_directive_errors(directive: str) -> None:
    with pytest.raises(DirectiveError):
        parse_directives(f"[[sim: {directive}]]")


async def test_nan_stall_is_a_400_and_the_log_stays_readable(client: httpx.AsyncClient) -> None:
    for directive in ("stall nan", "error 1e400", "delay inf"):
        response = await asyncio.wait_for(
            client.post("/v1/messages", json=body(f"x [[sim: {directive}]]"), headers=auth()), 2
        )
        assert response.status_code == 400, directive
        assert "x-should-retry" not in response.headers
    assert (await client.get("/_sim/requests")).status_code == 200


# --- 3. non-finite and absurd config values -------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        '{"latency": {"ttft_s": 1e400}}',
        '{"latency": {"ttft_s": NaN}}',
        '{"latency": {"tokens_per_s": Infinity}}',
        '{"faults": {"stall_s": 1e9}}',
        '{"request_log_size": 1e30}',
        '{"accounts": [{"name": "a", "token": "t", "windows": [{"length_s": 1e400}]}]}',
    ],
)
async def test_config_rejects_non_finite_and_absurd_values(client: httpx.AsyncClient, change: str) -> None:
    response = await client.post("/_sim/config", content=change, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert (await client.post("/v1/messages", json=body("still fine"), headers=auth())).status_code == 200


def test_config_model_rejects_inf() -> None:
    with pytest.raises(ValidationError):
        SimConfig.model_validate({"accounts": [{"name": "a", "token": "t", "windows": [{"length_s": float("inf")}]}]})


# --- 4. bounded memory ------------------------------------------------------------------------------------


async def test_request_log_keeps_a_bounded_part_of_each_conversation(client: httpx.AsyncClient) -> None:
    big = "x" * 30_000
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"FIRST {big} PROMPT-END"}]
    for i in range(99):
        messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": f"m{i} {big}"})
    messages.append({"role": "user", "content": "the last prompt"})
    assert (await client.post("/v1/messages", json=body(messages), headers=auth())).status_code == 200
    [entry] = (await client.get("/_sim/requests")).json()
    logged = entry["messages"]
    assert len(logged) == 1 + 1 + service_module.LOG_MESSAGES
    assert logged[0]["text"].startswith("FIRST") and logged[0]["text"].endswith("PROMPT-END")  # head and tail kept
    assert logged[1] == {"role": None, "text": f"[…{101 - 1 - service_module.LOG_MESSAGES} messages not logged…]"}
    assert logged[-1]["text"] == "the last prompt"
    assert all(len(m["text"]) <= service_module.LOG_TEXT_LIMIT + 60 for m in logged)


async def test_short_conversations_are_logged_whole(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    messages.append({"role": "user", "content": "three"})
    await client.post("/v1/messages", json=body(messages), headers=auth())
    [entry] = (await client.get("/_sim/requests")).json()
    assert [m["text"] for m in entry["messages"]] == ["one", "two", "three"]


def test_session_counters_are_a_bounded_lru() -> None:
    stats = Stats()
    for i in range(SESSION_LIMIT):
        stats.session(f"s{i}", "a")
    stats.session("s0", "a")  # used again: now the most recent
    stats.session("new", "a")
    assert len(stats.sessions) == SESSION_LIMIT
    assert "s0" in stats.sessions and "s1" not in stats.sessions and "new" in stats.sessions


async def test_directive_counters_are_a_bounded_lru(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "SEEN_LIMIT", 3)
    client = make_client()
    sim = client._transport.app.state.simulator  # type: ignore[attr-defined]
    for i in range(5):
        await client.post("/v1/messages", json=body(f"[[sim: text t{i}]]"), headers=auth())
    assert len(sim.seen) == 3


def test_anonymous_accounts_are_a_bounded_lru(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounts_module, "ANON_LIMIT", 2)
    registry = AccountRegistry(SimConfig())
    first = registry.lookup("tok-1", "oauth")
    registry.lookup("tok-2", "oauth")
    assert registry.lookup("tok-1", "oauth") is first  # used again: tok-2 is now the oldest
    registry.lookup("tok-3", "oauth")
    assert len(registry.accounts) == 2
    assert registry.lookup("tok-1", "oauth") is first
    assert first is not None and first.name in registry.accounts


# --- 5. deep nesting ---------------------------------------------------------------------------------------


async def test_deeply_nested_bodies_are_400(client: httpx.AsyncClient) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    head = '{"model": "claude-sonnet-5-5", "max_tokens": 10, "messages": '
    response = await client.post("/v1/messages", content=head + deep + "}", headers=auth())
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    # Parseable, but too deep for the code walking the request afterwards.
    nested = "[" * 960 + "]" * 960
    content = f'[{{"type": "text", "text": "hi", "extra": {nested}}}]'
    raw = f'{head}[{{"role": "user", "content": {content}}}], "cache_control": 1}}'
    response = await client.post("/v1/messages", content=raw, headers=auth())
    assert response.status_code in (200, 400)
    assert response.status_code == 200 or response.json()["error"]["type"] == "invalid_request_error"


async def test_deeply_nested_directive_and_config_are_400(client: httpx.AsyncClient) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    response = await client.post("/v1/messages", json=body(f'[[sim: tool t {{"a": {deep}}}]]'), headers=auth())
    assert response.status_code == 400
    assert "directive" in response.json()["error"]["message"]
    response = await client.post(
        "/v1/messages", json=body(f"[[sim: structured {'[' * 200}{']' * 200}]]"), headers=auth()
    )
    assert response.status_code == 400
    response = await client.post("/_sim/config", content=deep, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


# --- 6. unicode digits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["²", "٣", "-1", "x"])
async def test_requests_limit_must_be_ascii_digits(client: httpx.AsyncClient, limit: str) -> None:
    response = await client.get("/_sim/requests", params={"limit": limit})
    assert response.status_code == 400


# --- 7. reset while requests are in flight ----------------------------------------------------------------------


async def test_reset_during_a_request_leaves_in_flight_at_zero(client: httpx.AsyncClient) -> None:
    request = asyncio.create_task(client.post("/v1/messages", json=body("x [[sim: delay 0.3]]"), headers=auth()))
    await asyncio.sleep(0.1)
    assert (await client.get("/_sim/stats")).json()["totals"]["in_flight"] == 1
    await client.post("/_sim/reset")
    assert (await request).status_code == 200
    totals = (await client.get("/_sim/stats")).json()["totals"]
    assert totals["in_flight"] == 0
    assert all(a["in_flight"] == 0 for a in (await client.get("/_sim/stats")).json()["accounts"].values())


# --- 8. the CLI's own warnings -------------------------------------------------------------------------------


def _admitted(window: WindowConfig) -> dict[str, str]:
    acct = Account(name="a", kind="oauth", windows=[Window.from_config(window)])
    assert acct.admit(NOW) is None
    return acct.allowed_headers(NOW)


def test_no_utilization_where_the_cli_would_warn_on_its_own() -> None:
    # 5h: 0.95 used right at the start of a real 5-hour window: the CLI would warn
    # (docs/cli-behaviour.md#rate-limit-headers-and-events).
    headers = _admitted(WindowConfig(family="5h", length_s=18000, requests=100, used_requests=94))
    assert f"{UNIFIED}-5h-utilization" not in headers
    assert headers[f"{UNIFIED}-5h-reset"] == str(int(NOW + 18000))
    assert headers[f"{UNIFIED}-5h-status"] == "allowed"
    # 7d: 0.3 used at the start of a 7-day window.
    headers = _admitted(WindowConfig(family="7d", length_s=7 * 86400, requests=10, used_requests=2))
    assert f"{UNIFIED}-7d-utilization" not in headers


def test_utilization_is_sent_where_the_cli_stays_quiet_or_a_warning_is_meant() -> None:
    # A short window stands in for 5h: by the CLI's reckoning it is nearly over, so 0.95 does not warn.
    headers = _admitted(WindowConfig(family="5h", length_s=60, requests=100, used_requests=94))
    assert headers[f"{UNIFIED}-5h-utilization"] == "0.95"
    # Low utilization of a long window.
    headers = _admitted(WindowConfig(family="5h", length_s=18000, requests=100, used_requests=10))
    assert headers[f"{UNIFIED}-5h-utilization"] == "0.11"
    # A warning that is meant keeps its utilization (and the threshold header).
    headers = _admitted(WindowConfig(family="5h", length_s=18000, requests=100, used_requests=94, warn_at=0.9))
    assert headers[f"{UNIFIED}-5h-utilization"] == "0.95"
    assert headers[f"{UNIFIED}-5h-surpassed-threshold"] == "0.9"
