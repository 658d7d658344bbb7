"""A real Prometheus scrapes a worker's /metrics and the exporter; every dashboard query then returns data.

Prometheus is the Debian `prometheus` binary: without it the test skips locally and fails under CI=true. The
`PrometheusServer` helper is also used by the end-to-end metrics test (tests/e2e/test_metrics.py).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from prometheus_client import CollectorRegistry

from claudeq.accounts import AccountStore
from claudeq.config.settings import Settings
from claudeq.jobs import JobStore
from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec, Usage, WindowInfo, utcnow
from claudeq.script_calls import run_call
from claudeq.tenants import Admitted, AttemptCost, TenantStore
from claudeq.worker.metrics import exporter
from claudeq.worker.metrics.prometheus import WorkerMetrics
from claudeq.worker.run.outcome import RateLimitSignal
from tests.conftest import make_settings
from tests.support.binaries import require_binary

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "claudeq.json"
#: Grafana's variables, as a 1 s scrape makes sense of them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "10m"}


def prometheus_binary() -> str:
    """The prometheus server binary; skip (locally) or fail (CI=true) when missing."""
    return require_binary("prometheus", "apt-get install prometheus")


def free_port() -> int:
    """A free loopback port (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables filled in) for every target of the dashboard."""
    out = []
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"] + [p for row in dashboard["panels"] for p in row.get("panels", [])]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
            out.append((panel["title"], expr))
    return out


class PrometheusServer:
    """A private Prometheus scraping the given targets every second."""

    def __init__(self, targets: dict[str, list[str]]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="claudeq-prom-"))
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": t}]} for job, t in targets.items()],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        with (self.dir / "log").open("wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector; AssertionError with Prometheus' error when the query is refused."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert body["status"] == "success", f"{expr}: {body.get('error')}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_scraped(self, jobs: list[str], scrapes: int = 3, timeout: float = 60) -> None:
        """Until every target of `jobs` is up and has been scraped at least `scrapes` times."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                ready = all(
                    (rows := self.query(f'count_over_time(up{{job="{job}"}}[1m])'))
                    and all(float(r["value"][1]) >= scrapes for r in rows)
                    and all(float(r["value"][1]) == 1 for r in self.query(f'up{{job="{job}"}}'))
                    for job in jobs
                )
            except (httpx.HTTPError, AssertionError, ValueError):
                ready = False
            if ready:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not scrape {jobs}: {self.log()[-2000:]}")
            time.sleep(0.5)

    def log(self) -> str:
        """Prometheus' own log."""
        return (self.dir / "log").read_text(errors="replace")

    def stop(self) -> None:
        """Stop the server and remove its data."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def empty_queries(prometheus: PrometheusServer) -> list[str]:
    """Dashboard queries that return no series (should be none)."""
    return [f"{title}: {expr}" for title, expr in dashboard_queries() if not prometheus.query(expr)]


# ---- the test: one worker-like metrics server and the exporter on real Redis ---------------------------------


@pytest.fixture
def fleet_settings(redis_url: str, unique: str, tmp_path: Path) -> Settings:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(
        '[[accounts]]\nname = "alpha"\nkind = "oauth"\ntoken_env = "CQT_T_ALPHA"\nmax_concurrency = 2\n'
        "max_cost_usd_per_hour = 1.0\nutilization_ceiling = 0.8\n\n"
        '[[accounts]]\nname = "beta"\nkind = "api_key"\ntoken_env = "CQT_T_BETA"\n'
    )
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "default"\n\n'
        '[[tenants]]\nname = "team-a"\nmax_concurrency = 2\nweight = 3\nmax_cost_usd_per_hour = 0.5\n'
    )
    return make_settings(redis_url, unique, accounts_file=accounts, tenants_file=tenants)


@pytest.fixture
def populated(fleet_settings: Settings, redis_client: redis.Redis, store: JobStore) -> WorkerMetrics:
    """Redis state and worker samples as a short run of the fleet would leave them."""
    keys = Keys(fleet_settings.key_prefix)
    for i in range(3):
        run_call(
            store.create_call(JobRecord(id=f"job{i}", spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow()))
        )
    redis_client.zadd(keys.workers, {"w1": time.time() + 3600})
    AccountStore(redis_client, keys, fleet_settings.accounts).cool(
        "beta", datetime.fromtimestamp(time.time() + 600, UTC), "429"
    )
    # alpha's five-hour window at its ceiling: reserved until it resets.
    alpha = AccountStore(redis_client, keys, fleet_settings.accounts)
    resets = datetime.fromtimestamp(time.time() + 600, UTC)
    alpha.record_window("alpha", "five_hour", WindowInfo(status="allowed", utilization=0.85, resets_at=resets))
    alpha.record_utilization("alpha", [("five_hour", 0.85, resets.timestamp())])
    metrics = WorkerMetrics(CollectorRegistry(), mcp_tools=["mcp__calc__add"])
    metrics.run_started("alpha")
    metrics.queue_wait(0.4)
    usage = Usage(
        model_usage={"claude-sonnet-5-5": {"inputTokens": 12, "outputTokens": 5, "costUSD": 7.4e-5}},
    )
    metrics.usage("alpha", usage)
    metrics.attempt("alpha", "success")
    metrics.run_duration("alpha", "claude-sonnet-5-5", 3.2)
    metrics.job_finished(fleet_settings.queue, "succeeded")
    metrics.rate_limit_event("alpha", RateLimitSignal("allowed_warning", window="five_hour", utilization=0.91))
    metrics.retry("server_error")
    metrics.tool_call("mcp__calc__add")
    metrics.mirror_error()
    metrics.tenant_run("team-a")
    metrics.tenant_cost("team-a", 0.2)
    metrics.tenant_tokens("team-a", Usage(input_tokens=12, cache_read_tokens=900, cache_creation_tokens=100))
    metrics.notification("webhook", "delivered", 0.5)
    metrics.schedule_tick("fired")
    # A run of team-a in flight and its spend so far, as the worker's admission and settling leave them.
    tenants = TenantStore(redis_client, keys, fleet_settings.tenants)
    team_a = fleet_settings.tenants.governing("team-a")
    assert isinstance(run_call(tenants.admit_call(team_a, "job0", 600, 0.1)), Admitted)
    run_call(tenants.settle_call(AttemptCost("team-a", "alpha", "job9", 0.2)))
    return metrics


@pytest.mark.integration
def test_every_dashboard_query_returns_series_from_a_real_prometheus(
    fleet_settings: Settings, populated: WorkerMetrics
) -> None:
    prometheus_binary()
    worker_port = populated.serve(0, addr="127.0.0.1")
    exporter_port, stop_exporter = exporter.serve(fleet_settings, 0, addr="127.0.0.1")
    prometheus = PrometheusServer(
        {"claudeq-worker": [f"127.0.0.1:{worker_port}"], "claudeq-exporter": [f"127.0.0.1:{exporter_port}"]}
    )
    try:
        prometheus.wait_scraped(["claudeq-worker", "claudeq-exporter"])
        # a counter that moves between scrapes, so rates are not all zero
        populated.job_finished(fleet_settings.queue, "failed")
        populated.notification("webhook", "delivered", 0.8)
        populated.schedule_tick("fired")
        prometheus.wait_scraped(["claudeq-worker"], scrapes=5)
        assert empty_queries(prometheus) == []
        cost = prometheus.query('sum by (account) (claudeq_cost_usd_total{account="alpha"})')
        assert float(cost[0]["value"][1]) == pytest.approx(7.4e-5)
        cooling = prometheus.query('claudeq_account_state{account="beta",state="cooling"}')
        assert float(cooling[0]["value"][1]) == 1
        share = prometheus.query(
            'claudeq_tenant_spend_usd{tenant="team-a",window="hour"} / ignoring(window) '
            'claudeq_tenant_cost_cap_usd{tenant="team-a",window="hour"}'
        )
        assert float(share[0]["value"][1]) == pytest.approx(0.4)
        in_flight = prometheus.query('claudeq_tenant_runs_in_flight{tenant="team-a"}')
        assert float(in_flight[0]["value"][1]) == 1
        reserved = prometheus.query('claudeq_account_state{account="alpha",state="reserved"}')
        assert float(reserved[0]["value"][1]) == 1
        against = prometheus.query(
            "max by (account, window) (claudeq_account_utilization_ratio)"
            " / on (account, window) max by (account, window) (claudeq_account_ceiling_ratio)"
        )
        # The highest utilization any worker or the exporter reported (0.91, a worker's event) over the ceiling (0.8).
        assert [(r["metric"]["account"], float(r["value"][1])) for r in against] == [
            ("alpha", pytest.approx(0.91 / 0.8))
        ]
    finally:
        prometheus.stop()
        stop_exporter()
        populated.close()
