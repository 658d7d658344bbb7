"""End to end: what Prometheus reads equals what the job records say.

Two `claudeq-worker` processes (each with its own metrics port), two accounts on the simulator, an exporter process,
and a mix of jobs: plain successes, a tool call, a structured output, transient retries, a rate-limited account and
a failure. Then each worker's /metrics and the exporter's are scraped over HTTP and compared with the records and
their events; finally a real Prometheus scrapes the same processes and every dashboard query must return data.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.models import TERMINAL, JobRecord
from claudeq.producer.client import Client
from claudeq.worker.metrics.labels import BUILTIN_TOOLS, OTHER, TOKEN_TYPES, canonical_model, token_label, tool_label
from tests.conftest import make_settings
from tests.e2e.conftest import assert_no_secrets
from tests.integration.test_prometheus import PrometheusServer, empty_queries, free_port, prometheus_binary
from tests.support.procs import kill_claude, run_until
from tests.support.tree import ROOT
from tests.support.worker_proc import (
    FAST_E2E,
    SimAccount,
    WorkerProcess,
    start_worker,
    stop_all,
    worker_env,
    write_accounts_toml,
)

pytestmark = pytest.mark.e2e

ACCOUNTS = [SimAccount("alpha", max_concurrency=4), SimAccount("beta", max_concurrency=4)]
#: alpha: a long window that warns from the first request (utilization is reported; the account is chosen last).
ALPHA_WINDOW = {"family": "7d", "length_s": 3600, "requests": 100_000, "warn_at": 0.00001}
#: beta: a window already used up, so it rejects from its first request on, for the rest of the test (the
#: rate-limited account). A window with room left would not do: once beta reports utilization, predictive admission
#: holds it back before the window runs out, and whether a third request still reaches it depends on timing.
BETA_WINDOW = {"family": "5h", "length_s": 3600, "requests": 2, "used_requests": 2}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@dataclass
class Fleet:
    """The processes of the scenario and what it left behind."""

    settings: Settings
    worker_ports: list[int]
    exporter_port: int
    records: list[JobRecord]
    events: dict[str, list[Any]]


def scrape(port: int) -> Samples:
    """Samples of one /metrics endpoint, over HTTP: name -> sorted labels -> value."""
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def summed(scrapes: list[Samples], name: str, by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """`sum by (by) (name)` over several processes' samples, zero series dropped."""
    out: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for samples in scrapes:
        for labels, value in samples.get(name, {}).items():
            as_dict = dict(labels)
            out[tuple(as_dict[k] for k in by)] += value
    return {k: v for k, v in out.items() if v}


def start_exporter(settings: Settings, log_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`claudeq exporter` as its own process, with the workers' configuration."""
    port = free_port()
    with (log_dir / "exporter.log").open("wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "claudeq.producer.cli", "exporter", "--port", str(port), "--addr", "127.0.0.1"],
            env=worker_env(settings, ACCOUNTS),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def up() -> bool:
        assert proc.poll() is None, (log_dir / "exporter.log").read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    run_until(up, 30, 0.2, what="exporter serving")
    return proc, port


def rate_limited(records: list[JobRecord]) -> bool:
    """Whether some attempt was rate limited."""
    return any(a.outcome == "rate_limited" for r in records for a in r.attempts)


def submit_mix(client: Client) -> list[str]:
    """The scenario's jobs."""
    jobs = [
        *(client.submit(prompt=f"[[sim: tokens out={30 + i * 10}]] plain job {i}") for i in range(3)),
        client.submit(prompt='[[sim: tool mcp__claudeq__add {"a": 2, "b": 3}]] add two and three', mcp_tools=["add"]),
        client.submit(prompt='[[sim: structured {"n": 5}]] give me n', output_schema=SCHEMA),
        client.submit(prompt="[[sim: error 529 times=2]] [[sim: tokens out=25]] flaky twice"),
        client.submit(prompt="[[sim: error 500]] always broken", max_attempts=2),
    ]
    return [job.id for job in jobs]


@pytest.fixture(scope="module")
def fleet(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Run the scenario once for the module's tests (each real CLI run costs ~0.5 s CPU)."""
    from claudeq.simulator.testing import SimulatorServer

    tmp = tmp_path_factory.mktemp("metrics-e2e")
    windows = {"alpha": [ALPHA_WINDOW], "beta": [BETA_WINDOW]}
    sim_config = {
        "accounts": [
            {"name": a.name, "token": a.token_value, "kind": a.kind, "windows": windows[a.name]} for a in ACCOUNTS
        ]
    }
    workers: list[WorkerProcess] = []
    exporter: subprocess.Popen[bytes] | None = None
    client_redis = redis.Redis.from_url(redis_url)
    with SimulatorServer(sim_config) as sim:
        accounts_file = write_accounts_toml(tmp / "accounts.toml", ACCOUNTS, sim.base_url)
        # Spend caps far above what the scenario spends, so the tenants row of the dashboard has every series.
        text = accounts_file.read_text().replace('name = "alpha"', 'name = "alpha"\nmax_cost_usd_per_day = 100.0')
        accounts_file.write_text(text)
        tenants_file = tmp / "tenants.toml"
        tenants_file.write_text('[[tenants]]\nname = "default"\nmax_concurrency = 100\nmax_cost_usd_per_day = 100.0\n')
        receiver = _Receiver()  # a webhook receiver that accepts everything: the notification panels have data
        settings = make_settings(
            redis_url,
            uuid.uuid4().hex[:10],
            accounts_file=accounts_file,
            tenants_file=tenants_file,
            webhook_hosts=["127.0.0.1"],
            webhook_secret=SecretStr(WEBHOOK_SECRET),
            webhook_ports=[receiver.server.server_address[1]],  # a loopback receiver: its port and its range allowed
            webhook_allow_nets=["127.0.0.0/8"],
            **FAST_E2E,
        )
        settings = settings.model_copy(
            update={"policy": settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})}
        )
        try:
            ports = [free_port(), free_port()]
            for port in ports:
                workers.append(
                    start_worker(settings, ACCOUNTS, tmp, extra_env={"CLAUDEQ_METRICS_PORT": str(port)}, wait=False)
                )
            for worker in workers:
                worker.wait_ready()
            exporter, exporter_port = start_exporter(settings, tmp)
            client = Client(settings, redis_client=client_redis)
            ids = submit_mix(client)
            records = [client.wait(job_id, timeout=180, poll_s=0.2) for job_id in ids]
            # alpha warns, so beta is preferred: a few more plain jobs reach beta if the mix did not.
            for i in range(6):
                if rate_limited(records):
                    break
                ids.append(client.submit(prompt=f"[[sim: tokens out=15]] top-up {i}").id)
                records.append(client.wait(ids[-1], timeout=180, poll_s=0.2))
            # A job with a webhook, and a schedule that fires once: the notification and schedule panels.
            hooked = client.submit(prompt="[[sim: text hooked]] hooked", webhook={"url": receiver.url})
            ids.append(hooked.id)
            records.append(client.wait(hooked.id, timeout=180, poll_s=0.2))
            run_until(lambda: client.get(hooked.id).notifications, timeout=60, what="the webhook was not delivered")
            name = f"tick-{uuid.uuid4().hex[:6]}"
            client.add_schedule(name, prompt="[[sim: text tick]] tick", every_s=1)
            run_until(lambda: client.schedules()[0].fired >= 1, timeout=60, what="the schedule never fired")
            client.remove_schedule(name)
            time.sleep(1.5)  # a tick that was firing as it was removed has submitted by now
            for job in client.list(limit=200):
                if isinstance(job, JobRecord) and job.spec.metadata.get("schedule") == name:
                    ids.append(job.id)
                    records.append(client.wait(job.id, timeout=180, poll_s=0.2))
            yield Fleet(
                settings=settings,
                worker_ports=ports,
                exporter_port=exporter_port,
                records=records,
                events={job_id: list(client.events(job_id)) for job_id in ids},
            )
        finally:
            receiver.server.shutdown()
            receiver.server.server_close()
            if exporter is not None:
                exporter.terminate()
                exporter.wait(10)
            stop_all(workers)
            members: list[bytes] = client_redis.zrange(f"{settings.key_prefix}jobs", 0, -1)  # type: ignore[assignment]
            job_ids = [m.decode() for m in members]
            leftover = kill_claude(job_ids)
            assert_no_secrets(client_redis, settings, ACCOUNTS, [w.log() for w in workers])
            for key in client_redis.scan_iter(match=f"{settings.key_prefix}*", count=1000):
                client_redis.delete(key)
            client_redis.delete(settings.queue)
            client_redis.close()
            assert not leftover, f"claude processes outlived their workers: {leftover}"


WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"claudeq-metrics-e2e-webhook-secret").decode()


class _Receiver:
    """A loopback webhook receiver answering 200 to everything."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def worker_samples(fleet: Fleet) -> list[Samples]:
    return [scrape(port) for port in fleet.worker_ports]


def test_the_scenario_covers_what_it_claims(fleet: Fleet) -> None:
    by_prompt = {r.spec.prompt.split("]] ")[-1]: r for r in fleet.records}
    outcomes = [a.outcome for r in fleet.records for a in r.attempts]
    limited = [r for r in fleet.records if any(a.outcome == "rate_limited" for a in r.attempts)]
    assert limited and {a.account for r in limited for a in r.attempts if a.outcome == "rate_limited"} == {"beta"}
    assert any(r.status == "succeeded" for r in limited)  # rerun on the other account
    flaky = [a.outcome for a in by_prompt["flaky twice"].attempts]
    assert flaky[:2] == ["transient_error", "transient_error"]
    assert by_prompt["always broken"].status == "failed"
    structured = by_prompt["give me n"]
    assert structured.status == "succeeded" and structured.result is not None
    assert structured.result.structured_output == {"n": 5}
    assert any(e.type == "tool_call" for e in fleet.events[by_prompt["add two and three"].id])
    assert outcomes.count("transient_error") >= 3
    assert {a.account for r in fleet.records for a in r.attempts} == {"alpha", "beta"}


def test_each_worker_serves_its_own_metrics(fleet: Fleet, worker_samples: list[Samples]) -> None:
    per_worker = [sum(s.get("claudeq_attempts_total", {}).values()) for s in worker_samples]
    assert len(set(fleet.worker_ports)) == 2
    assert sum(per_worker) == sum(len(r.attempts) for r in fleet.records)


def test_tokens_and_cost_per_account_and_model_equal_the_attempts_usage(
    fleet: Fleet, worker_samples: list[Samples]
) -> None:
    tokens: defaultdict[tuple[str, ...], float] = defaultdict(float)
    cost: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for record in fleet.records:
        for attempt in record.attempts:
            if attempt.usage is None or attempt.account is None:
                continue
            for model_id, entry in attempt.usage.model_usage.items():
                model = canonical_model(model_id, entry)
                for kind, field in TOKEN_TYPES.items():
                    tokens[(attempt.account, model, kind)] += entry.get(field, 0)
                cost[(attempt.account, model)] += entry.get("costUSD", 0.0)
            if not attempt.usage.model_usage:
                tokens[(attempt.account, OTHER, "input")] += attempt.usage.input_tokens
                tokens[(attempt.account, OTHER, "output")] += attempt.usage.output_tokens
                cost[(attempt.account, OTHER)] += attempt.usage.cost_usd
    expected_tokens = {k: float(v) for k, v in tokens.items() if v}
    assert expected_tokens, "the scenario used no tokens"
    assert summed(worker_samples, "claudeq_tokens_total", ("account", "model", "type")) == expected_tokens
    scraped_cost = summed(worker_samples, "claudeq_cost_usd_total", ("account", "model"))
    assert scraped_cost.keys() == {k for k, v in cost.items() if v}
    for key, value in scraped_cost.items():
        assert value == pytest.approx(cost[key], rel=1e-9)
    total = sum(r.result.usage.cost_usd for r in fleet.records if r.result is not None)
    assert sum(scraped_cost.values()) >= total * (1 - 1e-9)  # the records' results cover the last attempts only


def test_tokens_per_tenant_equal_the_attempts_usage(fleet: Fleet, worker_samples: list[Samples]) -> None:
    tokens: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for record in fleet.records:
        for attempt in record.attempts:
            if attempt.usage is None or attempt.account is None:
                continue
            usage = attempt.usage
            for kind, count in (
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cacheRead", usage.cache_read_tokens),
                ("cacheCreation", usage.cache_creation_tokens),
            ):
                tokens[(record.spec.tenant, kind)] += count
    expected = {k: float(v) for k, v in tokens.items() if v}
    assert ("default", "cacheCreation") in expected and ("default", "cacheRead") in expected
    assert summed(worker_samples, "claudeq_tenant_tokens_total", ("tenant", "type")) == expected


def test_jobs_and_attempts_equal_the_records(fleet: Fleet, worker_samples: list[Samples]) -> None:
    terminal = Counter(r.status for r in fleet.records if r.status in TERMINAL)
    finished = summed(worker_samples, "claudeq_jobs_finished_total", ("status",))
    assert finished == {(status,): float(n) for status, n in terminal.items()}
    attempts = Counter((a.account or "", a.outcome or "") for r in fleet.records for a in r.attempts)
    assert summed(worker_samples, "claudeq_attempts_total", ("account", "outcome")) == {
        k: float(v) for k, v in attempts.items()
    }


def test_rate_limit_events_retries_and_tool_calls_equal_the_events(fleet: Fleet, worker_samples: list[Samples]) -> None:
    rate_limits: Counter[tuple[str, ...]] = Counter()
    retries: Counter[tuple[str, ...]] = Counter()
    tools: Counter[tuple[str, ...]] = Counter()
    for record in fleet.records:
        account_of = {a.number: a.account or "" for a in record.attempts}
        for event in fleet.events[record.id]:
            if event.type == "rate_limit":
                status = event.data.get("status")
                window = token_label(event.data.get("window"))
                rate_limits[(account_of[event.attempt], status, window)] += 1
            elif event.type == "retry":
                retries[(token_label(event.data["reason"]),)] += 1
            elif event.type == "tool_call":
                tools[(tool_label(event.data["tool"], BUILTIN_TOOLS | {"mcp__claudeq__add"}),)] += 1
    assert any(key[1] == "rejected" for key in rate_limits), rate_limits
    assert summed(worker_samples, "claudeq_rate_limit_events_total", ("account", "status", "window")) == {
        k: float(v) for k, v in rate_limits.items()
    }
    assert summed(worker_samples, "claudeq_retries_total", ("reason",)) == {k: float(v) for k, v in retries.items()}
    assert summed(worker_samples, "claudeq_tool_calls_total", ("tool",)) == {k: float(v) for k, v in tools.items()}
    assert tools[("mcp__claudeq__add",)] == 1


def test_exporter_matches_redis_and_the_records(fleet: Fleet) -> None:
    samples = scrape(fleet.exporter_port)
    assert samples["claudeq_exporter_redis_up"][()] == 1
    statuses = Counter(r.status for r in fleet.records)
    jobs = {dict(k)["status"]: v for k, v in samples["claudeq_jobs"].items() if v}
    assert jobs == {status: float(n) for status, n in statuses.items()}
    assert samples["claudeq_workers"][(("state", "live"),)] == 2
    assert samples["claudeq_queue_depth"][(("queue", fleet.settings.queue),)] == 0
    assert samples["claudeq_account_state"][(("account", "beta"), ("state", "cooling"))] == 1
    assert samples["claudeq_account_cooldown_seconds"][(("account", "beta"),)] > 0
    assert samples["claudeq_account_state"][(("account", "alpha"), ("state", "cooling"))] == 0
    utilization = samples.get("claudeq_account_utilization_ratio", {})
    assert utilization, "no utilization recorded for any account"


def test_every_dashboard_query_returns_series_from_a_real_prometheus(fleet: Fleet) -> None:
    prometheus_binary()
    prometheus = PrometheusServer(
        {
            "claudeq-worker": [f"127.0.0.1:{port}" for port in fleet.worker_ports],
            "claudeq-exporter": [f"127.0.0.1:{fleet.exporter_port}"],
        }
    )
    try:
        prometheus.wait_scraped(["claudeq-worker", "claudeq-exporter"], scrapes=4)
        assert empty_queries(prometheus) == []
        cost = prometheus.query("sum(claudeq_cost_usd_total)")
        expected = sum(a.usage.cost_usd for r in fleet.records for a in r.attempts if a.usage is not None)
        assert float(cost[0]["value"][1]) == pytest.approx(expected, rel=1e-6)
    finally:
        prometheus.stop()
