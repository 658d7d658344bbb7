"""The Grafana dashboard and the alert rules: provisioned shape, in sync with their builder, only real metric names."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import fakeredis
import yaml
from prometheus_client import CollectorRegistry

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import Usage
from claudeq.worker.metrics.exporter import ClusterCollector
from claudeq.worker.metrics.prometheus import WorkerMetrics
from claudeq.worker.run.outcome import RateLimitSignal

ROOT = Path(__file__).resolve().parents[3]
OPS = ROOT / "ops"
DASHBOARD = OPS / "grafana" / "dashboards" / "claudeq.json"
_NAME = re.compile(r"\bclaudeq_[a-z_]+\b")


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dashboard", OPS / "grafana" / "build_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of every panel (rows included)."""
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def exposed_names(fake_settings: Settings, tmp_path: Path) -> set[str]:
    """Every sample name the workers and the exporter can expose (each method exercised once)."""
    worker = WorkerMetrics(CollectorRegistry())
    worker.job_finished("q", "succeeded")
    worker.attempt("a", "success")
    worker.run_duration("a", "claude-sonnet-5-5", 1)
    worker.queue_wait(1)
    worker.run_started("a")
    worker.usage("a", Usage(model_usage={"claude-sonnet-5-5": {"inputTokens": 1, "costUSD": 0.1}}))
    worker.rate_limit_event("a", RateLimitSignal("allowed_warning", window="five_hour", utilization=0.9))
    worker.retry("server_error")
    worker.tool_call("Read")
    worker.mirror_error()
    worker.tenant_run("default")
    worker.tenant_cost("default", 0.1)
    worker.tenant_tokens("default", Usage(input_tokens=1, cache_read_tokens=9, cache_creation_tokens=2))
    worker.schedule_tick("fired")
    worker.notification("webhook", "delivered", 0.5)
    redis = fakeredis.FakeRedis()
    redis.zadd(Keys(fake_settings.key_prefix).deferred, {"j": 1.0})
    keys = Keys(fake_settings.key_prefix)
    redis.hset(keys.account("a"), "w:five_hour", '{"status": "allowed", "utilization": 1.0}')
    redis.hset(keys.account("a"), mapping={"pws": "five_hour", "pu:five_hour": "1.0 9999999999 0 1 - 1"})
    pool = AccountPool(accounts=[AccountConfig(name="a", kind="oauth", token_env="T", max_cost_usd_per_hour=1.0)])
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "default"\nmax_concurrency = 2\nmax_cost_usd_per_day = 5\n')
    exporter = CollectorRegistry()
    exporter.register(ClusterCollector(fake_settings.model_copy(update={"tenants_file": tenants}), redis, pool=pool))
    return {s.name for reg in (worker.registry, exporter) for family in reg.collect() for s in family.samples}


def test_committed_json_matches_its_builder() -> None:
    assert DASHBOARD.read_text() == load_builder().render(), "run: python ops/grafana/build_dashboard.py"


def test_dashboard_has_fixed_uids_and_no_import_placeholders() -> None:
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)
    datasource = yaml.safe_load((OPS / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    assert dashboard["uid"] == "claudeq-fleet"
    assert "${DS_" not in text and "__inputs" not in dashboard
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid


def test_panels_fit_the_grid_without_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(json.loads(DASHBOARD.read_text())):
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells.get((x, y))}"
                cells[(x, y)] = panel["title"]


def test_dashboard_covers_what_operators_watch() -> None:
    exprs = " ".join(dashboard_exprs(json.loads(DASHBOARD.read_text())))
    for name in (
        "claudeq_jobs_finished_total",
        "claudeq_queue_depth",
        "claudeq_runs_in_progress",
        "claudeq_run_duration_seconds_bucket",
        "claudeq_queue_wait_seconds_bucket",
        "claudeq_tokens_total",
        "claudeq_cost_usd_total",
        "claudeq_account_state",
        "claudeq_account_utilization_ratio",
        "claudeq_account_cooldown_seconds",
        "claudeq_account_reserved_seconds",
        "claudeq_account_ceiling_ratio",
        "claudeq_rate_limit_events_total",
        "claudeq_retries_total",
        "claudeq_tool_calls_total",
        "claudeq_tenant_runs_in_flight",
        "claudeq_tenant_jobs_waiting",
        "claudeq_tenant_runs_total",
        "claudeq_tenant_spend_usd",
        "claudeq_tenant_cost_cap_usd",
        "claudeq_account_spend_usd",
        "claudeq_tenant_cost_usd_total",
        "claudeq_tenant_tokens_total",
        "claudeq_notifications_total",
        "claudeq_notification_latency_seconds_bucket",
        "claudeq_schedule_ticks_total",
    ):
        assert name in exprs


def test_every_metric_in_dashboard_and_alerts_is_exposed(fake_settings: Settings, tmp_path: Path) -> None:
    exposed = exposed_names(fake_settings, tmp_path)
    dashboard = set(_NAME.findall(" ".join(dashboard_exprs(json.loads(DASHBOARD.read_text())))))
    rules = yaml.safe_load((OPS / "prometheus/alerts.yml").read_text())
    alert_exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
    alerts = set(_NAME.findall(alert_exprs))
    assert dashboard - exposed == set()
    assert alerts - exposed == set()


def test_every_alert_the_issue_asks_for_exists() -> None:
    rules = yaml.safe_load((OPS / "prometheus/alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {
        "ClaudeqAllAccountsUnavailable",
        "ClaudeqAccountDisabled",
        "ClaudeqFailureRateHigh",
        "ClaudeqBacklogGrowing",
        "ClaudeqNoLiveWorker",
        "ClaudeqCostPerHourHigh",
        "ClaudeqTenantBudget80",
        "ClaudeqTenantBudgetExhausted",
        "ClaudeqAccountBudget80",
        "ClaudeqAccountBudgetExhausted",
    } <= names


def test_layout_picture_renders_from_the_dashboard(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("render_layout", OPS / "grafana" / "render_layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "layout.png"
    module.render(json.loads(DASHBOARD.read_text()), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "docs" / "dashboard.png").exists()


def test_snapshot_draws_every_panel_from_query_results(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("snapshot", OPS / "grafana" / "snapshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["snapshot"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["snapshot"]
    asked: list[str] = []

    class FakePrometheus:
        def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
            asked.append(expr)
            values = [[start + i * 2, str(float(i % 5))] for i in range(30)]
            return [{"metric": {"account": "a", "state": "ok", "status": "succeeded"}, "values": values}]

    dashboard = json.loads(DASHBOARD.read_text())
    out = tmp_path / "snapshot.png"
    module.render(FakePrometheus(), dashboard, 1_700_000_000.0, 1_700_000_060.0, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(asked) == len(dashboard_exprs(dashboard))  # every target of every panel was evaluated
    assert all("$" not in expr for expr in asked)
    assert module.legend("{{account}}: {{state}}", {"account": "a", "state": "ok"}) == "a: ok"
    assert module.fmt_value(0.25, "percentunit") == "25%"
