"""The HTTP surface, through httpx on the ASGI app: Messages API answers, errors, directives, stats, config."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.unit.simulator.conftest import API_KEY, MakeClient, auth, body, parse_sse, reply_text

ACCOUNTS: dict[str, Any] = {
    "accounts": [
        {
            "name": "oa",
            "token": "tok-oa",
            "kind": "oauth",
            "windows": [{"family": "5h", "length_s": 120, "requests": 2, "warn_at": 0.5}],
        },
        {"name": "key", "token": "tok-key", "kind": "api_key", "windows": [{"length_s": 60, "requests": 1}]},
        {"name": "revoked", "token": "tok-revoked", "auth_fail": True},
    ]
}


async def test_streaming_reply_has_the_event_sequence_the_cli_expects(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=body("Tell me about queues"), headers=auth())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [e for i, (e, _) in enumerate(events) if i == 0 or events[i - 1][0] != e]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["model"] == "claude-sonnet-5-5"
    assert start["usage"]["input_tokens"] > 0
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert events[-2][1]["usage"]["output_tokens"] > 0
    assert "Tell me about queues" in reply_text(events)


async def test_reply_is_deterministic(client: httpx.AsyncClient) -> None:
    texts = [
        reply_text(parse_sse((await client.post("/v1/messages", json=body("same prompt"), headers=auth())).text))
        for _ in range(2)
    ]
    assert texts[0] == texts[1]


async def test_non_streaming_reply(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=body('hello [[sim: text "fixed"]]', stream=False), headers=auth())
    assert response.status_code == 200
    message = response.json()
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": "fixed"}]
    assert message["usage"]["output_tokens"] >= 1


@pytest.mark.parametrize(
    ("payload", "status", "error_type", "message"),
    [
        (b"{not json", 400, "invalid_request_error", "parsing the body"),
        (b"[1, 2]", 400, "invalid_request_error", "valid dictionary"),
        (json.dumps({"max_tokens": 5, "messages": []}).encode(), 400, "invalid_request_error", "model: Field required"),
        (json.dumps({"model": "claude-x", "max_tokens": 5}).encode(), 400, "invalid_request_error", "messages: Field"),
        (
            json.dumps({"model": "claude-x", "messages": [{"role": "user", "content": "x"}]}).encode(),
            400,
            "invalid_request_error",
            "max_tokens: Field required",
        ),
        (json.dumps(body("x", max_tokens=0)).encode(), 400, "invalid_request_error", "max_tokens"),
        (json.dumps(body([])).encode(), 400, "invalid_request_error", "at least one message"),
        (json.dumps(body([{"role": "robot", "content": "x"}])).encode(), 400, "invalid_request_error", "role"),
        (json.dumps(body([{"role": "user", "content": 5}])).encode(), 400, "invalid_request_error", "content"),
        (
            json.dumps(body([{"role": "user", "content": [{"text": "no type"}]}])).encode(),
            400,
            "invalid_request_error",
            "content.0",
        ),
        (json.dumps(body("x", stream="yes")).encode(), 400, "invalid_request_error", "stream"),
        (json.dumps(body("x", tools="all")).encode(), 400, "invalid_request_error", "tools"),
        (json.dumps(body("x", system=7)).encode(), 400, "invalid_request_error", "system"),
        (json.dumps(body("x", model="gpt-4o")).encode(), 404, "not_found_error", "model: gpt-4o"),
        (json.dumps(body("[[sim: frobnicate]]")).encode(), 400, "invalid_request_error", "frobnicate"),
        (b"\xff\xfe", 400, "invalid_request_error", "parsing the body"),
    ],
)
async def test_bad_input_gets_the_api_error_body(
    client: httpx.AsyncClient, payload: bytes, status: int, error_type: str, message: str
) -> None:
    response = await client.post("/v1/messages", content=payload, headers=auth())
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == error_type
    assert message in error["error"]["message"]
    assert error["request_id"].startswith("req_")


async def test_unknown_path_and_method_answer_json_errors(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models/whatever")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    response = await client.get("/v1/messages")
    assert response.status_code == 405
    assert response.json()["type"] == "error"


async def test_the_wire_log_has_every_request_on_any_path_credentials_named_by_account(
    make_client: MakeClient,
) -> None:
    client = make_client({"accounts": [{"name": "team-a", "token": API_KEY, "kind": "api_key"}]})
    await client.post("/v1/messages?beta=true", json=body("hi"), headers=auth(API_KEY, "api_key"))
    await client.post("/api/oauth/claude_cli/create_api_key", json={}, headers={"authorization": "Bearer nobody"})
    await client.get("/_sim/stats")  # control routes are not part of it
    wire = (await client.get("/_sim/wire")).json()
    assert [(e["method"], e["path"], e["query"], e["account"]) for e in wire] == [
        ("POST", "/v1/messages", "beta=true", "team-a"),
        ("POST", "/api/oauth/claude_cli/create_api_key", "", None),
    ]
    assert ["x-api-key", "<account team-a>"] in wire[0]["headers"]
    assert ["authorization", "<unknown>"] in wire[1]["headers"]
    assert API_KEY not in json.dumps(wire) and "nobody" not in json.dumps(wire)
    assert len((await client.get("/_sim/wire?limit=1")).json()) == 1
    await client.post("/_sim/reset")
    assert (await client.get("/_sim/wire")).json() == []


async def test_preconnect_hello(client: httpx.AsyncClient) -> None:
    response = await client.head("/api/hello")
    assert response.status_code == 200


async def test_missing_credentials_get_401(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=body("x"))
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


async def test_configured_accounts_refuse_unknown_tokens(make_client: MakeClient) -> None:
    client = make_client(ACCOUNTS)
    response = await client.post("/v1/messages", json=body("x"), headers=auth("sk-ant-oat01-unknown"))
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert "sk-ant-oat01-unknown" not in response.text
    assert (await client.post("/v1/messages", json=body("x"), headers=auth("tok-revoked"))).status_code == 401
    stats = (await client.get("/_sim/stats")).json()
    assert stats["totals"]["unknown_token"] == 1
    assert stats["accounts"]["revoked"]["auth_failed"] == 1


async def test_oauth_account_warns_then_rejects_with_the_window_reset(make_client: MakeClient) -> None:
    client = make_client(ACCOUNTS)
    before = time.time()
    first = await client.post("/v1/messages", json=body("one"), headers=auth("tok-oa"))
    assert first.status_code == 200
    assert first.headers["anthropic-ratelimit-unified-5h-status"] == "allowed_warning"
    assert first.headers["anthropic-ratelimit-unified-5h-utilization"] == "0.5"
    assert first.headers["anthropic-ratelimit-unified-5h-surpassed-threshold"] == "0.5"
    reset = int(first.headers["anthropic-ratelimit-unified-5h-reset"])
    assert before + 120 <= reset <= time.time() + 121
    assert (await client.post("/v1/messages", json=body("two"), headers=auth("tok-oa"))).status_code == 200
    third = await client.post("/v1/messages", json=body("three"), headers=auth("tok-oa"))
    assert third.status_code == 429
    assert third.json()["error"]["type"] == "rate_limit_error"
    assert third.headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert int(third.headers["anthropic-ratelimit-unified-reset"]) == reset
    stats = (await client.get("/_sim/stats")).json()["accounts"]["oa"]
    assert (stats["requests"], stats["rejected"]) == (3, 1)
    assert stats["windows"][0]["resets_at"] == reset


async def test_api_key_account_gets_plain_429_with_retry_after(make_client: MakeClient) -> None:
    client = make_client(ACCOUNTS)
    assert (await client.post("/v1/messages", json=body("a"), headers=auth("tok-key", "api_key"))).status_code == 200
    second = await client.post("/v1/messages", json=body("b"), headers=auth("tok-key", "api_key"))
    assert second.status_code == 429
    assert 1 <= int(second.headers["retry-after"]) <= 60
    assert not any(h.startswith("anthropic-ratelimit-unified") for h in second.headers)


@pytest.mark.parametrize(
    ("status", "error_type"), [(529, "overloaded_error"), (500, "api_error"), (401, "authentication_error")]
)
async def test_error_directive(client: httpx.AsyncClient, status: int, error_type: str) -> None:
    response = await client.post("/v1/messages", json=body(f"x [[sim: error {status}]]"), headers=auth())
    assert response.status_code == status
    assert response.json()["error"]["type"] == error_type


async def test_error_429_directive_depends_on_account_kind(client: httpx.AsyncClient) -> None:
    oauth = await client.post("/v1/messages", json=body("x [[sim: error 429]]"), headers=auth())
    assert oauth.status_code == 429
    assert oauth.headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert int(oauth.headers["anthropic-ratelimit-unified-reset"]) > time.time()
    key = await client.post("/v1/messages", json=body("x [[sim: error 429]]"), headers=auth(API_KEY, "api_key"))
    assert key.status_code == 429
    assert "retry-after" in key.headers
    assert "anthropic-ratelimit-unified-status" not in key.headers


async def test_error_429_retry_after_sends_exactly_that_hint_or_none(client: httpx.AsyncClient) -> None:
    for headers in (auth(), auth(API_KEY, "api_key")):
        three = await client.post("/v1/messages", json=body("x [[sim: error 429 retry_after=3]]"), headers=headers)
        assert three.status_code == 429
        assert three.headers["retry-after"] == "3"
        assert not any(k.startswith("anthropic-ratelimit-") for k in three.headers)
        bare = await client.post("/v1/messages", json=body("y [[sim: error 429 retry_after=none]]"), headers=headers)
        assert bare.status_code == 429
        assert "retry-after" not in bare.headers
        assert not any(k.startswith("anthropic-ratelimit-") for k in bare.headers)
    refused = await client.post("/v1/messages", json=body("z [[sim: error 500 retry_after=3]]"), headers=auth())
    assert refused.status_code == 400
    assert "retry_after" in refused.json()["error"]["message"]


async def test_error_times_counts_requests_with_the_same_message(client: httpx.AsyncClient) -> None:
    prompt = "nonce-1 [[sim: error 500 times=2]]"
    statuses = [(await client.post("/v1/messages", json=body(prompt), headers=auth())).status_code for _ in range(3)]
    assert statuses == [500, 500, 200]
    # Another message has its own count.
    other = await client.post("/v1/messages", json=body("nonce-2 [[sim: error 500 times=2]]"), headers=auth())
    assert other.status_code == 500


async def test_error_after_lets_the_first_request_through(client: httpx.AsyncClient) -> None:
    prompt = "n [[sim: error 500 after=1 times=1]]"
    statuses = [(await client.post("/v1/messages", json=body(prompt), headers=auth())).status_code for _ in range(3)]
    assert statuses == [200, 500, 200]


async def test_tool_directive_streams_input_json_delta_then_answers_the_result(client: httpx.AsyncClient) -> None:
    prompt = 'add [[sim: tool mcp__calc__add {"a": 2, "b": 3}]]'
    events = parse_sse((await client.post("/v1/messages", json=body(prompt), headers=auth())).text)
    start = next(d for e, d in events if e == "content_block_start")["content_block"]
    assert (start["type"], start["name"], start["input"]) == ("tool_use", "mcp__calc__add", {})
    partial = "".join(d["delta"]["partial_json"] for e, d in events if e == "content_block_delta")
    assert json.loads(partial) == {"a": 2, "b": 3}
    assert next(d for e, d in events if e == "message_delta")["delta"]["stop_reason"] == "tool_use"
    follow_up: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": start["id"], "name": start["name"], "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": start["id"], "content": [{"type": "text", "text": "sum=5"}]}
            ],
        },
        {"role": "system", "content": "environment"},
    ]
    events = parse_sse((await client.post("/v1/messages", json=body(follow_up), headers=auth())).text)
    assert reply_text(events) == "Tool said: sum=5"


async def test_directives_come_from_the_latest_plain_user_message(client: httpx.AsyncClient) -> None:
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": "turn one [[sim: error 529]]"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": 'turn two [[sim: text "second"]]'}]},
    ]
    response = await client.post("/v1/messages", json=body(conversation), headers=auth())
    assert response.status_code == 200
    assert reply_text(parse_sse(response.text)) == "second"


async def test_structured_output_tool_gets_a_schema_valid_call(client: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}, "required": ["n"]}
    tools = [{"name": "StructuredOutput", "description": "…", "input_schema": schema}]
    events = parse_sse((await client.post("/v1/messages", json=body("go", tools=tools), headers=auth())).text)
    start = next(d for e, d in events if e == "content_block_start")["content_block"]
    assert start["name"] == "StructuredOutput"
    partial = "".join(d["delta"]["partial_json"] for e, d in events if e == "content_block_delta")
    assert json.loads(partial) == {"n": 3}
    given = body('go [[sim: structured {"n": 42}]]', stream=False, tools=tools)
    message = (await client.post("/v1/messages", json=given, headers=auth())).json()
    assert message["content"][0]["input"] == {"n": 42}


async def test_title_request_is_answered_with_a_title_and_never_fails(client: httpx.AsyncClient) -> None:
    title_request = body(
        "<session>Fix the flaky queue test [[sim: error 529]]</session>",
        stream=False,
        system=[{"type": "text", "text": "You are naming a coding session. Reply with a title."}],
        tools=[],
    )
    response = await client.post("/v1/messages", json=title_request, headers=auth(session="s-1"))
    assert response.status_code == 200
    title = json.loads(response.json()["content"][0]["text"])["title"]
    assert title.startswith("Fix the flaky queue test")
    stats = (await client.get("/_sim/stats")).json()
    account = next(iter(stats["accounts"].values()))
    assert (account["requests"], account["title_requests"], account["errors_injected"]) == (0, 1, 0)
    assert stats["sessions"] == {}


async def test_tokens_directive_sets_usage_and_reply_length(client: httpx.AsyncClient) -> None:
    events = parse_sse(
        (await client.post("/v1/messages", json=body("x [[sim: tokens out=500 in=40]]"), headers=auth())).text
    )
    assert events[0][1]["message"]["usage"]["input_tokens"] == 40
    assert next(d for e, d in events if e == "message_delta")["usage"]["output_tokens"] == 500
    assert len(reply_text(events)) == 2000


async def test_repeated_prefix_is_a_cache_read(client: httpx.AsyncClient) -> None:
    system = [{"type": "text", "text": "S" * 8000, "cache_control": {"type": "ephemeral"}}]
    first = parse_sse((await client.post("/v1/messages", json=body("first", system=system), headers=auth())).text)
    second = parse_sse((await client.post("/v1/messages", json=body("second", system=system), headers=auth())).text)
    u1, u2 = first[0][1]["message"]["usage"], second[0][1]["message"]["usage"]
    assert u1["cache_read_input_tokens"] == 0 and u1["cache_creation_input_tokens"] >= 2000
    assert u2["cache_read_input_tokens"] == u1["cache_creation_input_tokens"]
    # Without cache_control nothing is cached, as with the real API.
    plain = parse_sse((await client.post("/v1/messages", json=body("p", system="S" * 4000), headers=auth())).text)
    assert plain[0][1]["message"]["usage"]["cache_read_input_tokens"] == 0


def _sum_usage(events: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    usage = events[0][1]["message"]["usage"]
    return {
        "input": usage["input_tokens"],
        "cache_read": usage["cache_read_input_tokens"],
        "cache_creation": usage["cache_creation_input_tokens"],
        "output": next(d for e, d in events if e == "message_delta")["usage"]["output_tokens"],
    }


async def test_stats_bill_exactly_what_the_stream_reported(client: httpx.AsyncClient) -> None:
    totals = {"input": 0, "output": 0, "cache_read": 0, "cache_creation": 0}
    for i in range(3):
        response = await client.post("/v1/messages", json=body(f"prompt {i}"), headers=auth(session="sess-A"))
        for key, value in _sum_usage(parse_sse(response.text)).items():
            totals[key] += value
    await client.post("/v1/messages", json=body("other"), headers=auth(session="sess-B"))
    stats = (await client.get("/_sim/stats")).json()
    assert stats["sessions"]["sess-A"]["requests"] == 3
    assert stats["sessions"]["sess-A"]["tokens"] == totals
    (account,) = stats["accounts"].values()
    assert account["requests"] == 4
    assert stats["totals"]["requests"] == 4
    assert account["in_flight"] == 0 and account["max_in_flight"] == 1


async def test_request_log_shape_and_no_secrets(make_client: MakeClient) -> None:
    client = make_client(ACCOUNTS)
    await client.post(
        "/v1/messages",
        json=body('log me [[sim: text "t"]]', tools=[{"name": "Bash", "input_schema": {}}], system="sys"),
        headers=auth("tok-oa", session="sess-L"),
    )
    await client.post("/v1/messages", json=body("x"), headers=auth("sk-secret-unknown"))
    (entry, refused) = (await client.get("/_sim/requests")).json()
    assert entry["account"] == "oa"
    assert entry["session_id"] == "sess-L"
    assert entry["model"] == "claude-sonnet-5-5"
    assert entry["stream"] is True
    assert entry["tool_names"] == ["Bash"]
    assert entry["messages"] == [{"role": "user", "text": 'log me [[sim: text "t"]]'}]
    assert entry["system_text_len"] == 3
    assert entry["status"] == 200
    assert entry["directives"] == ['text "t"']
    assert refused["status"] == 401 and refused["account"] is None
    assert entry["seq"] < refused["seq"]
    everything = (await client.get("/_sim/requests")).text + (await client.get("/_sim/stats")).text
    everything += (await client.get("/_sim/config")).text
    for secret in ("tok-oa", "tok-key", "tok-revoked", "sk-secret-unknown"):
        assert secret not in everything
    assert len((await client.get("/_sim/requests?limit=1")).json()) == 1


async def test_runtime_config_changes_limits_and_faults(make_client: MakeClient) -> None:
    client = make_client(ACCOUNTS)
    await client.post("/v1/messages", json=body("a"), headers=auth("tok-key", "api_key"))
    assert (await client.post("/v1/messages", json=body("b"), headers=auth("tok-key", "api_key"))).status_code == 429
    accounts = ACCOUNTS["accounts"][:]
    accounts[1] = {**accounts[1], "windows": [{"length_s": 60, "requests": 5}]}
    response = await client.post("/_sim/config", json={"accounts": accounts, "faults": {"p_529": 1.0}})
    assert response.status_code == 200
    assert "tok-key" not in response.text
    assert (await client.post("/v1/messages", json=body("c"), headers=auth("tok-key", "api_key"))).status_code == 529
    await client.post("/_sim/config", json={"faults": {"p_529": 0.0}})
    assert (await client.post("/v1/messages", json=body("d"), headers=auth("tok-key", "api_key"))).status_code == 200


async def test_runtime_config_refuses_bad_values_without_echoing_them(client: httpx.AsyncClient) -> None:
    response = await client.post("/_sim/config", json={"accounts": [{"name": "x", "token": 12345, "kind": "weird"}]})
    assert response.status_code == 400
    assert "kind" in response.json()["error"]["message"]
    assert "12345" not in response.text
    assert (await client.post("/_sim/config", content=b"nope")).status_code == 400


async def test_reset_clears_counters(client: httpx.AsyncClient) -> None:
    await client.post("/v1/messages", json=body("n [[sim: error 500 times=1]]"), headers=auth())
    await client.post("/_sim/reset")
    stats = (await client.get("/_sim/stats")).json()
    assert stats["accounts"] == {} and stats["totals"]["requests"] == 0
    assert (await client.get("/_sim/requests")).json() == []
    # The directive's count starts again too.
    response = await client.post("/v1/messages", json=body("n [[sim: error 500 times=1]]"), headers=auth())
    assert response.status_code == 500


async def test_seeded_faults_are_reproducible(make_client: MakeClient) -> None:
    async def statuses() -> list[int]:
        client = make_client({"seed": 3, "faults": {"p_529": 0.3, "p_500": 0.2}})
        return [(await client.post("/v1/messages", json=body(f"p{i}"), headers=auth())).status_code for i in range(30)]

    first, second = await statuses(), await statuses()
    assert first == second
    assert {200, 500, 529} <= set(first)


async def test_latency_settings_resolve_account_then_model_then_default() -> None:
    from claudeq.simulator.service import Simulator

    sim = Simulator(
        {
            "latency": {"ttft_s": 1, "tokens_per_s": 50, "models": {"claude-opus-5-5": {"tokens_per_s": 10}}},
            "accounts": [{"name": "fast", "token": "t", "ttft_s": 0.1}],
        }
    )
    account = sim.registry.lookup("t", "oauth")
    assert account is not None
    assert sim.latency(account, "claude-opus-5-5") == (0.1, 10)
    assert sim.latency(account, "claude-sonnet-5-5") == (0.1, 50)


async def test_a_call_asked_for_again_is_made_even_merged_into_the_tool_results(client: httpx.AsyncClient) -> None:
    # What a resumed session sends once a person approved a call its run parked on (docs/jobs.md#tool-approval):
    # the CLI merges the new prompt into the message holding the rejected tool result.
    prompt = 'p [[sim: tool Bash {"command": "git push"}]]'
    again = 'A person approved it. Call Bash again now with exactly this input: {"command": "git push"}'
    resumed: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "rejected", "is_error": True},
                {"type": "text", "text": again},
            ],
        },
        {"role": "system", "content": "environment"},
    ]
    events = parse_sse((await client.post("/v1/messages", json=body(resumed), headers=auth())).text)
    start = next(d for e, d in events if e == "content_block_start")["content_block"]
    assert (start["type"], start["name"]) == ("tool_use", "Bash")
    partial = "".join(d["delta"]["partial_json"] for e, d in events if e == "content_block_delta")
    assert json.loads(partial) == {"command": "git push"}
    # Its result is answered like any other: the turn's calls are done.
    done = [
        *resumed[:-1],
        {"role": "assistant", "content": [{"type": "tool_use", "id": start["id"], "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": start["id"], "content": "pushed"}]},
    ]
    assert reply_text(parse_sse((await client.post("/v1/messages", json=body(done), headers=auth())).text)) == (
        "Tool said: pushed"
    )
