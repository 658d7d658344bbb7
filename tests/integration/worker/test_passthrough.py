"""The worker's pass-through: streams unchanged and unbuffered, cancels upstream when the client goes,
puts the real token on the upstream request only, reads the rate-limit headers, and a crash fails its runs as
transient (real CLI and simulator for the runs)."""

from __future__ import annotations

import asyncio
import gzip
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.models import Event, JobSpec
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.delivery.failure import decide
from claudeq.worker.passthrough.limit_headers import LimitFacts, LimitHint
from claudeq.worker.passthrough.server import PassThrough
from claudeq.worker.run.runner import Runner, RunRequest
from tests.support.procs import run_until

pytestmark = pytest.mark.integration

OAUTH = "sk-ant-oat01-test-passthrough"
API_KEY = "sk-ant-api03-test-passthrough"
BODY = {"model": "claude-sonnet-5-5", "max_tokens": 64000, "stream": True}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    config = {
        "accounts": [
            {"name": "o", "token": OAUTH, "kind": "oauth", "tokens_per_s": 4000},
            {"name": "k", "token": API_KEY, "kind": "api_key", "windows": [{"family": "5h", "length_s": 60}]},
        ]
    }
    with SimulatorServer(config) as server:
        yield server


@pytest.fixture
def recorded() -> list[tuple[str, LimitFacts]]:
    return []


@pytest.fixture
def passthrough(recorded: list[tuple[str, LimitFacts]]) -> Iterator[PassThrough]:
    def sink(account: str, facts: LimitFacts) -> LimitHint | None:
        recorded.append((account, facts))
        return None

    server = PassThrough(sink)
    server.start()
    yield server
    server.close()


@pytest.fixture
def accounts(sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, AccountConfig]:
    monkeypatch.setenv("CQT_PT_OAUTH", OAUTH)
    monkeypatch.setenv("CQT_PT_KEY", API_KEY)
    return {
        "o": AccountConfig(name="o", kind="oauth", token_env="CQT_PT_OAUTH", base_url=sim.base_url),
        "k": AccountConfig(name="k", kind="api_key", token_env="CQT_PT_KEY", base_url=sim.base_url),
    }


def message(text: str) -> dict[str, Any]:
    return {**BODY, "messages": [{"role": "user", "content": text}]}


_IDS = re.compile(rb'"(msg|toolu|req)_[A-Za-z0-9_]+"')


def events(raw: bytes) -> list[bytes]:
    """SSE events with the per-request ids blanked (they differ between two requests)."""
    return [_IDS.sub(b'"ID"', e) for e in raw.split(b"\n\n") if e.strip()]


# ---- a scripted upstream: fixed bytes, one chunk at a time, each only after the client has read the last ------------


class LockstepUpstream:
    """Answers one request with `chunks` (gzip-compressed, chunked), sending chunk i+1 only once the test says the
    client received chunk i: a pass-through that buffers anything deadlocks instead of delivering."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.sent: list[bytes] = []
        self.acks = [threading.Event() for _ in chunks]
        self.request_head = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with self.sock:  # one request: stop listening once it is accepted
            conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.request_head = data.split(b"\r\n\r\n", 1)[0]
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                b"X-Odd-Case: Kept\r\nanthropic-ratelimit-requests-remaining: 7\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for i, chunk in enumerate(self.chunks):
                conn.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                self.sent.append(chunk)
                if not self.acks[i].wait(10):
                    return
            conn.sendall(b"0\r\n\r\n")


def test_a_stream_passes_byte_for_byte_and_each_chunk_before_the_next_is_sent(
    passthrough: PassThrough, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"".join(b'event: content_block_delta\ndata: {"i": %d}\n\n' % i for i in range(400))
    compressed = gzip.compress(payload)
    chunks = [compressed[i : i + 97] for i in range(0, len(compressed), 97)]
    upstream = LockstepUpstream(chunks)
    monkeypatch.setenv("CQT_PT_LOCK", API_KEY)
    account = AccountConfig(name="lock", kind="api_key", token_env="CQT_PT_LOCK", base_url=upstream.url)
    grant = passthrough.open_run("lock-run", account)
    received: list[bytes] = []
    with httpx.Client(trust_env=False, timeout=30) as client:
        request = client.build_request(
            "POST",
            f"{grant.base_url}/v1/messages?beta=true",
            headers={"x-api-key": grant.token, "user-agent": "cq-test/1", "accept-encoding": "gzip"},
            content=b"{}",
        )
        response = client.send(request, stream=True)
        assert response.status_code == 200
        assert response.headers["content-encoding"] == "gzip"
        assert ("X-Odd-Case", "Kept") in [(k.decode(), v.decode()) for k, v in response.headers.raw]
        pending = 0
        for chunk in response.iter_raw():
            received.append(chunk)
            got = sum(len(c) for c in received)
            while pending < len(chunks) and sum(len(c) for c in chunks[: pending + 1]) <= got:
                upstream.acks[pending].set()  # only now may the upstream send the next chunk
                pending += 1
        response.close()
    assert b"".join(received) == compressed  # unchanged: still compressed, every byte
    assert gzip.decompress(b"".join(received)) == payload
    assert len(received) >= len(chunks) // 2  # delivered as it came, not in one piece
    # The real token went upstream, the stand-in did not.
    head = upstream.request_head.decode("latin-1").lower()
    assert f"x-api-key: {API_KEY}".lower() in head
    assert grant.token.lower() not in head
    assert "user-agent: cq-test/1" in head and "python-httpx" not in head  # the client's headers, not its own
    assert "post /v1/messages?beta=true http/1.1" in head


def test_a_long_simulator_reply_is_the_same_through_it_as_direct(
    sim: SimulatorServer, passthrough: PassThrough, accounts: dict[str, AccountConfig]
) -> None:
    body = message("write a long answer [[sim: tokens out=3000]]")
    grant = passthrough.open_run("long", accounts["o"])
    with httpx.Client(trust_env=False, timeout=60) as client:
        direct = client.post(f"{sim.base_url}/v1/messages", json=body, headers={"authorization": f"Bearer {OAUTH}"})
        through = client.post(
            f"{grant.base_url}/v1/messages?beta=true", json=body, headers={"authorization": f"Bearer {grant.token}"}
        )
    assert direct.status_code == through.status_code == 200
    assert len(events(through.content)) > 100
    assert events(through.content) == events(direct.content)
    hop = {"date", "request-id", "transfer-encoding"}
    assert {k for k in through.headers if k not in hop} == {k for k in direct.headers if k not in hop}


def test_a_client_that_goes_away_cancels_the_upstream_request(
    sim: SimulatorServer, passthrough: PassThrough, accounts: dict[str, AccountConfig], unique: str
) -> None:
    grant = passthrough.open_run("gone", accounts["o"])
    before = sim.stats()["totals"]["in_flight"]
    with socket.create_connection(("127.0.0.1", passthrough.port)) as conn:
        payload = httpx.Request("POST", "http://x/", json=message(f"[[sim: stall 60]] {unique}")).content
        conn.sendall(
            b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer %b\r\ncontent-length: %d\r\n\r\n%b" % (grant.token.encode(), len(payload), payload)
        )
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")  # headers and message_start, then the stall
        run_until(lambda: sim.stats()["totals"]["in_flight"] > before, 10, 0.05, what="upstream stream open")
    run_until(lambda: sim.stats()["totals"]["in_flight"] == before, 10, 0.05, what="upstream stream cancelled")


def test_only_a_live_stand_in_reaches_upstream(
    sim: SimulatorServer, passthrough: PassThrough, accounts: dict[str, AccountConfig]
) -> None:
    grant = passthrough.open_run("short-lived", accounts["k"])
    before = sim.stats()["accounts"].get("k", {}).get("requests", 0)
    url = f"{grant.base_url}/v1/messages?beta=true"
    with httpx.Client(trust_env=False, timeout=30) as client:
        assert client.post(url, json=message("hi"), headers={"x-api-key": grant.token}).status_code == 200
        assert client.post(url, json=message("hi"), headers={"x-api-key": API_KEY}).status_code == 401
        passthrough.close_run(grant)
        refused = client.post(url, json=message("hi"), headers={"x-api-key": grant.token})
    assert refused.status_code == 401
    assert "stand-in" in refused.json()["error"]["message"]
    assert sim.stats()["accounts"]["k"]["requests"] == before + 1


def test_the_rate_limit_headers_of_each_response_are_recorded_for_its_account(
    sim: SimulatorServer,
    passthrough: PassThrough,
    accounts: dict[str, AccountConfig],
    recorded: list[tuple[str, LimitFacts]],
    unique: str,
) -> None:
    sim.configure(
        {
            "accounts": [
                {"name": "o", "token": OAUTH, "kind": "oauth"},
                {
                    "name": "k",
                    "token": API_KEY,
                    "kind": "api_key",
                    "windows": [{"family": "5h", "length_s": 30, "requests": 1, "tokens": 10**6}],
                },
            ]
        }
    )
    try:
        grant = passthrough.open_run("facts", accounts["k"])
        url = f"{grant.base_url}/v1/messages?beta=true"
        with httpx.Client(trust_env=False, timeout=30) as client:
            ok = client.post(url, json=message(f"one {unique}"), headers={"x-api-key": grant.token})
            limited = client.post(url, json=message(f"two {unique}"), headers={"x-api-key": grant.token})
        assert (ok.status_code, limited.status_code) == (200, 429)
        asyncio.run(passthrough.settle(grant))
        (first_account, first), (_, second) = recorded[-2:]
        assert first_account == "k"
        assert (first.windows["requests"].limit, first.windows["requests"].remaining) == (1, 0)
        assert first.windows["tokens"].limit == 10**6
        assert second.rejected
        assert second.retry_after_s is not None and 20 <= second.retry_after_s <= 31
        hint = second.until()
        assert hint is not None and "retry-after" in hint[1]
    finally:
        sim.configure(
            {
                "accounts": [
                    {"name": "o", "token": OAUTH, "kind": "oauth", "tokens_per_s": 4000},
                    {"name": "k", "token": API_KEY, "kind": "api_key"},
                ]
            }
        )


# ---- runs: the real CLI through it, and what a crash of it does to them --------------------------------------------


@pytest.fixture
def runner(accounts: dict[str, AccountConfig], passthrough: PassThrough, tmp_path: Path) -> Runner:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, run_root=tmp_path / "runs", cli_max_retries=0, warm_clients=0
    )
    settings.__dict__["accounts"] = AccountPool(accounts=list(accounts.values()))
    return Runner(settings, passthrough=passthrough)


async def _run(runner: Runner, account: AccountConfig, prompt: str) -> Any:
    async def emit(event: Event) -> None:
        return None

    request = RunRequest(job_id=f"pt-{time.monotonic_ns()}", attempt=1, spec=JobSpec(prompt=prompt), account=account)
    return await runner.run(request, emit, asyncio.Event())


async def test_a_run_gets_a_stand_in_and_succeeds_through_it(
    runner: Runner, accounts: dict[str, AccountConfig], passthrough: PassThrough, unique: str
) -> None:
    outcome = await _run(runner, accounts["k"], f"[[sim: text fine]] {unique}")
    assert outcome.got_result and not outcome.is_error, outcome
    assert outcome.result.text == "fine"
    assert outcome.passthrough_failed is None
    assert passthrough.runs == 0  # its stand-in died with it


async def test_a_crash_of_the_pass_through_fails_its_run_as_transient_and_the_next_run_gets_a_new_one(
    sim: SimulatorServer, runner: Runner, accounts: dict[str, AccountConfig], passthrough: PassThrough, unique: str
) -> None:
    before = sim.stats()["totals"]["in_flight"]
    first_port = passthrough.port
    task = asyncio.create_task(_run(runner, accounts["o"], f"[[sim: stall 20]] {unique}"))
    for _ in range(300):
        if sim.stats()["totals"]["in_flight"] > before:
            break
        await asyncio.sleep(0.1)
    passthrough.stop()  # the server goes away with the run's stream open
    outcome = await asyncio.wait_for(task, 60)
    assert outcome.passthrough_failed, outcome
    decision = decide(outcome, accounts["o"], 0, 3, now=datetime.now(UTC), rate_limit_cooldown_s=60)
    assert (decision.outcome, decision.action) == ("transient_error", "retry")
    assert "pass-through" in decision.detail

    again = await _run(runner, accounts["o"], f"[[sim: text back]] {unique} again")
    assert again.got_result and not again.is_error and again.passthrough_failed is None
    assert passthrough.alive and passthrough.port != first_port


#: Calls a run's shell could make with its CLI's stand-in that the CLI itself never makes.
NOT_THE_CLIS = [
    ("POST", "/api/oauth/claude_cli/create_api_key", "path"),
    ("POST", "/v1/messages/batches", "path"),
    ("POST", "/v1/messages/batches?beta=true", "path"),
    ("GET", "/v1/models", "path"),
    ("GET", "/v1/messages?beta=true", "method"),
    ("POST", "/v1/messages?beta=true&x=1", "query"),
    ("POST", "/v1/messages/count_tokens?beta=false", "query"),
]


@pytest.mark.parametrize("kind", ["o", "k"])
def test_only_the_calls_the_cli_makes_are_forwarded_the_rest_is_refused_here(
    sim: SimulatorServer, accounts: dict[str, AccountConfig], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    refusals: list[tuple[str, str]] = []
    server = PassThrough(refused=lambda method, reason: refusals.append((method, reason)))
    server.start()
    try:
        grant = server.open_run("probe", accounts[kind])
        header = {"authorization": f"Bearer {grant.token}"} if kind == "o" else {"x-api-key": grant.token}
        before = len(sim.wire())
        with httpx.Client(trust_env=False, timeout=30) as client, caplog.at_level("WARNING", "claudeq.passthrough"):
            for method, target, _ in NOT_THE_CLIS:
                answer = client.request(method, grant.base_url + target, json={"name": "minted"}, headers=header)
                assert answer.status_code == 403, (method, target, answer.text)
                assert answer.headers["x-claudeq-passthrough"] == "local"
                error = answer.json()
                assert error["type"] == "error" and error["error"]["type"] == "permission_error"
                assert "only the Messages API calls" in error["error"]["message"]
            received = sim.wire()[before:]
            assert received == [], "a refused call reached upstream"
            # What the CLI does send still goes through, with the real credential.
            ok = client.post(grant.base_url + "/v1/messages?beta=true", json=message("hi"), headers=header)
            assert ok.status_code == 200
            counted = client.post(grant.base_url + "/v1/messages/count_tokens?beta=true", json={}, headers=header)
            assert (
                counted.headers.get("x-claudeq-passthrough") != "local"
            )  # forwarded (the simulator has no such route)
    finally:
        server.close()
    assert refusals == [(m, reason) for m, _, reason in NOT_THE_CLIS]
    forwarded = [(e["method"], e["path"], e["query"], e["account"]) for e in sim.wire()[before:]]
    assert forwarded == [
        ("POST", "/v1/messages", "beta=true", kind),
        ("POST", "/v1/messages/count_tokens", "beta=true", kind),
    ]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "/api/oauth/claude_cli/create_api_key" in logged and "/v1/messages/batches" in logged
    for secret in (grant.token, OAUTH, API_KEY):
        assert secret not in logged


def test_it_starts_and_answers_on_its_socket_under_a_temp_dir_too_long_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose TMPDIR is deep (a socket path holds at most 107 bytes) still starts its pass-through, and the
    Unix socket the run sandboxes reach it through answers (docs/architecture.md#the-run-sandbox)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    passthrough = PassThrough()
    try:
        passthrough.start()
        assert passthrough.unix_path is not None and len(str(passthrough.unix_path).encode()) <= 107
        transport = httpx.HTTPTransport(uds=str(passthrough.unix_path))
        with httpx.Client(transport=transport, base_url="http://claudeq") as client:
            answer = client.get("/v1/models")
        assert answer.status_code in (401, 403, 404), answer.text  # the pass-through's own refusal: it answered
    finally:
        passthrough.close()
    assert passthrough.unix_path is not None and not passthrough.unix_path.exists()
