"""Build ops/grafana/dashboards/claudeq.json: the claudeq fleet dashboard (run: python ops/grafana/build_dashboard.py).

The JSON is generated so panels stay consistent (one datasource uid, one layout grid); the committed file is what
Grafana provisions, and a test checks it matches this script's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "claudeq-prometheus"}
DASHBOARD_UID = "claudeq-fleet"
OUT = Path(__file__).parent / "dashboards" / "claudeq.json"
RATE = "$__rate_interval"


def target(expr: str, legend: str, ref: str = "A", instant: bool = False) -> dict[str, Any]:
    """One PromQL query of a panel."""
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": not instant,
        "instant": instant,
    }


def panel(
    title: str,
    kind: str,
    pos: tuple[int, int, int, int],
    targets: list[dict[str, Any]],
    unit: str = "short",
    description: str = "",
    stack: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A panel at grid position (x, y, w, h) on Grafana's 24-column grid."""
    x, y, w, h = pos
    custom: dict[str, Any] = {}
    if kind == "timeseries":
        custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
        if stack:
            custom["stacking"] = {"mode": "normal", "group": "A"}
    body: dict[str, Any] = {
        "title": title,
        "description": description,
        "type": kind,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]}}
        if kind == "timeseries"
        else {},
    }
    body.update(extra or {})
    return body


def row(title: str, y: int) -> dict[str, Any]:
    """A collapsible row header."""
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def quantiles(metric: str, by: str = "") -> list[dict[str, Any]]:
    """p50 and p95 of a histogram, summed over every worker process."""
    group = f"le{', ' + by if by else ''}"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        target(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[{RATE}])))", f"{prefix}p{int(q * 100)}")
        for q in (0.5, 0.95)
    ]


def panels() -> list[dict[str, Any]]:
    """Every panel, top to bottom."""
    out: list[dict[str, Any]] = [row("Fleet", 0)]
    out += [
        panel(
            "Jobs finished /s by status",
            "timeseries",
            (0, 1, 8, 8),
            [target(f"sum by (status) (rate(claudeq_jobs_finished_total[{RATE}]))", "{{status}}")],
            unit="ops",
            stack=True,
        ),
        panel(
            "Queue depth and deferred jobs",
            "timeseries",
            (8, 1, 8, 8),
            [
                target("sum by (queue) (claudeq_queue_depth)", "queue {{queue}}"),
                target("sum(claudeq_deferred_jobs)", "deferred"),
            ],
        ),
        panel(
            "Runs in progress by account",
            "timeseries",
            (16, 1, 8, 8),
            [target("sum by (account) (claudeq_runs_in_progress)", "{{account}}")],
            stack=True,
        ),
        panel(
            "Jobs by status (retained)",
            "bargauge",
            (0, 9, 6, 7),
            [target("sum by (status) (claudeq_jobs)", "{{status}}", instant=True)],
            extra={"options": {"orientation": "horizontal", "displayMode": "basic"}},
        ),
        panel(
            "Workers",
            "stat",
            (6, 9, 4, 7),
            [target("sum by (state) (claudeq_workers)", "{{state}}", instant=True)],
            description="Live = heartbeat within the lease TTL.",
        ),
        panel("Run time p50 / p95", "timeseries", (10, 9, 7, 7), quantiles("claudeq_run_duration_seconds"), unit="s"),
        panel("Queue wait p50 / p95", "timeseries", (17, 9, 7, 7), quantiles("claudeq_queue_wait_seconds"), unit="s"),
        panel(
            "Attempts /s by outcome",
            "timeseries",
            (0, 16, 12, 7),
            [target(f"sum by (outcome) (rate(claudeq_attempts_total[{RATE}]))", "{{outcome}}")],
            unit="ops",
            stack=True,
        ),
        panel(
            "Run time p95 by model",
            "timeseries",
            (12, 16, 12, 7),
            [quantiles("claudeq_run_duration_seconds", by="model")[1]],
            unit="s",
        ),
    ]
    out.append(row("Tokens and cost", 23))
    out += [
        panel(
            "Tokens /s by type",
            "timeseries",
            (0, 24, 12, 8),
            [target(f"sum by (type) (rate(claudeq_tokens_total[{RATE}]))", "{{type}}")],
            stack=True,
        ),
        panel(
            "Tokens /s by model",
            "timeseries",
            (12, 24, 6, 8),
            [target(f"sum by (model) (rate(claudeq_tokens_total[{RATE}]))", "{{model}}")],
            stack=True,
        ),
        panel(
            "Prompt cache hit ratio by account",
            "timeseries",
            (18, 24, 6, 8),
            [
                target(
                    f'sum by (account) (rate(claudeq_tokens_total{{type="cacheRead"}}[{RATE}])) / sum by (account) '
                    f'(rate(claudeq_tokens_total{{type=~"input|cacheRead|cacheCreation"}}[{RATE}]))',
                    "{{account}}",
                )
            ],
            unit="percentunit",
            description="Input-side tokens read from the prompt cache (a tenth of the price) over all input-side "
            "tokens; cache affinity (docs/architecture.md#cache-affinity) raises it.",
        ),
        panel(
            "Cost per hour by account",
            "timeseries",
            (0, 32, 9, 8),
            [target(f"sum by (account) (rate(claudeq_cost_usd_total[{RATE}])) * 3600", "{{account}}")],
            unit="currencyUSD",
            stack=True,
        ),
        panel(
            "Cost per hour by model",
            "timeseries",
            (9, 32, 9, 8),
            [target(f"sum by (model) (rate(claudeq_cost_usd_total[{RATE}])) * 3600", "{{model}}")],
            unit="currencyUSD",
            stack=True,
        ),
        panel(
            "Cost in range",
            "stat",
            (18, 32, 6, 8),
            [target("sum by (account) (increase(claudeq_cost_usd_total[$__range]))", "{{account}}", instant=True)],
            unit="currencyUSD",
        ),
    ]
    out.append(row("Accounts", 40))
    out += [
        panel(
            "Account state",
            "stat",
            (0, 41, 8, 8),
            [target("max by (account, state) (claudeq_account_state) == 1", "{{account}}: {{state}}", instant=True)],
            description="ok / warning (chosen last) / cooling (rate limited) / reserved (a window at its utilization "
            "ceiling) / disabled (e.g. 401).",
            extra={"options": {"textMode": "name", "colorMode": "background"}},
        ),
        panel(
            "Utilization per window",
            "timeseries",
            (8, 41, 8, 8),
            [target("max by (account, window) (claudeq_account_utilization_ratio)", "{{account}} {{window}}")],
            unit="percentunit",
            description="Last utilization reported by the rate-limit headers (OAuth accounts).",
        ),
        panel(
            "Cooldown remaining",
            "timeseries",
            (16, 41, 8, 8),
            [target("max by (account) (claudeq_account_cooldown_seconds)", "{{account}}")],
            unit="s",
        ),
        panel(
            "Rate-limit events /min",
            "timeseries",
            (0, 49, 12, 8),
            [
                target(
                    f"sum by (account, status) (rate(claudeq_rate_limit_events_total[{RATE}])) * 60",
                    "{{account}} {{status}}",
                )
            ],
        ),
        panel(
            "Slots in use",
            "timeseries",
            (12, 49, 12, 8),
            [
                target("max by (account) (claudeq_account_slots_in_use)", "{{account}} in use"),
                target("max by (account) (claudeq_account_slots_max)", "{{account}} max"),
            ],
        ),
    ]
    out += [
        panel(
            "Reserved accounts (until the window resets)",
            "timeseries",
            (0, 57, 12, 8),
            [target("max by (account, window) (claudeq_account_reserved_seconds)", "{{account}} {{window}}")],
            unit="s",
            description="Accounts (or, for a model family's own window, that family) taking no new run because a "
            "window is at its utilization ceiling: seconds until it resets.",
        ),
        panel(
            "Utilization against ceiling",
            "timeseries",
            (12, 57, 12, 8),
            [
                target(
                    "max by (account, window) (claudeq_account_utilization_ratio)"
                    " / on (account, window) max by (account, window) (claudeq_account_ceiling_ratio)",
                    "{{account}} {{window}}",
                )
            ],
            unit="percentunit",
            description="Each window's reported utilization as a fraction of its ceiling (utilization_ceiling or "
            "[accounts.ceilings]): at 100% the account is reserved for that window until it resets.",
        ),
    ]
    out.append(row("Retries and tools", 65))
    out += [
        panel(
            "Retries /s by reason",
            "timeseries",
            (0, 66, 8, 8),
            [target(f"sum by (reason) (rate(claudeq_retries_total[{RATE}]))", "{{reason}}")],
            unit="ops",
            stack=True,
        ),
        panel(
            "Tool calls /s by tool",
            "timeseries",
            (8, 66, 8, 8),
            [target(f"sum by (tool) (rate(claudeq_tool_calls_total[{RATE}]))", "{{tool}}")],
            unit="ops",
            stack=True,
        ),
        panel(
            "Session mirror errors /s",
            "timeseries",
            (16, 66, 8, 8),
            [target(f"sum(rate(claudeq_session_mirror_errors_total[{RATE}]))", "mirror errors")],
            unit="ops",
        ),
    ]
    out.append(row("Tenants", 74))
    out += [
        panel(
            "Runs in flight per tenant",
            "timeseries",
            (0, 75, 8, 8),
            [
                target("max by (tenant) (claudeq_tenant_runs_in_flight)", "{{tenant}}"),
                target("max by (tenant) (claudeq_tenant_max_concurrency)", "{{tenant}} max"),
            ],
            description="Runs of each tenant in flight fleet-wide, against its max_concurrency.",
        ),
        panel(
            "Jobs waiting per tenant",
            "timeseries",
            (8, 75, 8, 8),
            [target("max by (tenant) (claudeq_tenant_jobs_waiting)", "{{tenant}}")],
            description="Queued or deferred jobs of each tenant (its backlog).",
        ),
        panel(
            "Runs started /s per tenant (slot share)",
            "timeseries",
            (16, 75, 8, 8),
            [target(f"sum by (tenant) (rate(claudeq_tenant_runs_total[{RATE}]))", "{{tenant}}")],
            unit="ops",
            stack=True,
            description="Under contention, the shares follow the tenants' weights.",
        ),
        panel(
            "Spend vs cap",
            "timeseries",
            (0, 83, 12, 8),
            [
                target(
                    "max by (tenant, window) (claudeq_tenant_spend_usd / claudeq_tenant_cost_cap_usd)",
                    "tenant {{tenant}} per {{window}}",
                ),
                target(
                    "max by (account, window) (claudeq_account_spend_usd / claudeq_account_cost_cap_usd)",
                    "account {{account}} per {{window}}",
                ),
            ],
            unit="percentunit",
            description="Spend in the current calendar hour / day (UTC) over the cap; alerts at 80% and 100%.",
        ),
        panel(
            "Prompt cache tokens /s per tenant",
            "timeseries",
            (18, 83, 6, 8),
            [
                target(
                    f'sum by (tenant, type) (rate(claudeq_tenant_tokens_total{{type=~"cacheRead|cacheCreation"}}'
                    f"[{RATE}]))",
                    "{{tenant}} {{type}}",
                )
            ],
            stack=True,
        ),
        panel(
            "Cost per tenant",
            "timeseries",
            (12, 83, 6, 8),
            [
                target(f"sum by (tenant) (rate(claudeq_tenant_cost_usd_total[{RATE}])) * 3600", "{{tenant}} $/h"),
                target('max by (tenant) (claudeq_tenant_spend_usd{window="hour"})', "{{tenant}} this hour"),
            ],
            unit="currencyUSD",
        ),
    ]
    out.append(row("Notifications and schedules", 91))
    out += [
        panel(
            "End notifications /s by outcome",
            "timeseries",
            (0, 92, 8, 8),
            [target(f"sum by (target, outcome) (rate(claudeq_notifications_total[{RATE}]))", "{{target}} {{outcome}}")],
            unit="ops",
            description="Tries of webhooks and Celery callbacks: delivered, failed (tried again), dead (given up on: "
            "claudeq webhooks retry).",
        ),
        panel(
            "Job end to notification delivered p50 / p95",
            "timeseries",
            (8, 92, 8, 8),
            quantiles("claudeq_notification_latency_seconds", "target"),
            unit="s",
            description="A receiver that fails or hangs shows here as its retries' backoff.",
        ),
        panel(
            "Schedule ticks /s by outcome",
            "timeseries",
            (16, 92, 8, 8),
            [target(f"sum by (outcome) (rate(claudeq_schedule_ticks_total[{RATE}]))", "{{outcome}}")],
            unit="ops",
            description="fired (a job submitted), missed (no scheduler within the grace), refused (the spec no longer "
            "passes submit's checks).",
        ),
    ]
    for i, item in enumerate(out, start=1):
        item["id"] = i
    return out


def dashboard() -> dict[str, Any]:
    """The whole dashboard model (schema as Grafana 10/11 writes it)."""
    return {
        "uid": DASHBOARD_UID,
        "title": "claudeq fleet",
        "description": "Jobs, tokens, cost, accounts and rate limits of a claudeq fleet (docs/metrics.md).",
        "tags": ["claudeq"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "links": [],
        "panels": panels(),
    }


def render() -> str:
    """The dashboard as the committed JSON text."""
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
