"""Per-process Prometheus metrics of a worker (docs/metrics.md): counters, histograms and gauges on own registry.

Every worker process serves its own registry on its own port (`CLAUDEQ_METRICS_PORT`); Prometheus scrapes each
process and sums across them, so nothing here is shared between processes and a restarted worker simply starts its
counters at zero again (dashboards use `rate`/`increase`, which handle that reset).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from claudeq.errors import ConfigError
from claudeq.models import Usage

from ..run.outcome import RateLimitSignal
from .labels import (
    BUILTIN_TOOLS,
    HTTP_METHODS,
    OTHER,
    RATE_LIMIT_STATUSES,
    REFUSAL_REASONS,
    TOKEN_TYPES,
    canonical_model,
    counter_value,
    model_label,
    token_label,
    tool_label,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: Run durations from a second to two hours (agent runs are long).
RUN_BUCKETS_S: tuple[float, ...] = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 5400, 7200)
#: Queue waits from 50 ms (an idle fleet) to hours (a deferred backlog).
WAIT_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 21600)


def _never_raise(method: Callable[P, R | None]) -> Callable[P, R | None]:
    """Metrics must never break a run: log and swallow whatever goes wrong."""

    @wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return method(*args, **kwargs)
        except Exception:
            log.exception("metrics: %s failed", method.__name__)
            return None

    return wrapper


#: The `modelUsage` field of each token type, in TOKEN_TYPES' order (WorkerMetrics._usage_children).
_USAGE_KEYS: tuple[str, ...] = tuple(TOKEN_TYPES.values())

#: The end notifications a job may have (claudeq.models.NotificationTarget): the metrics' `target` label.
NOTIFICATION_TARGETS = frozenset({"events", "webhook", "link", "link_error"})


class WorkerMetrics:
    """The metrics of one worker process, on their own registry (so tests and several workers can build several)."""

    def __init__(self, registry: CollectorRegistry | None = None, mcp_tools: Iterable[str] = ()) -> None:
        """`mcp_tools`: the wire names (`mcp__claudeq__<tool>`) of the MCP tools this worker registered; they and
        the built-in tools are the only `tool` label values."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.known_tools: frozenset[str] = BUILTIN_TOOLS | frozenset(mcp_tools)
        self._server: Any = None
        self._lock = threading.Lock()
        #: Each labelled series' child, by (metric, label values): what `labels()` finds, without its checks and
        #: lock on every count (a job counts ~16 series). As bounded as the series are (the labels are).
        self._children: dict[tuple[Any, ...], Any] = {}
        #: The usage series of each (account, model) and the token series of each tenant, as bounded as `_children`.
        self._usage_series: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = {}
        self._tenant_series: dict[str, tuple[Any, ...]] = {}
        self._add_run_metrics(self.registry)
        self._add_tenant_metrics(self.registry)
        self._add_loop_metrics(self.registry)

    def _add_run_metrics(self, reg: CollectorRegistry) -> None:
        """Jobs, attempts and runs: outcomes, durations, usage, rate limits, tools."""
        self.jobs_finished = Counter(
            "claudeq_jobs_finished", "Jobs that reached a terminal status.", ["queue", "status"], registry=reg
        )
        self.attempts = Counter(
            "claudeq_attempts", "Attempts by account and outcome.", ["account", "outcome"], registry=reg
        )
        self.run_duration_seconds = Histogram(
            "claudeq_run_duration_seconds",
            "Wall time of one attempt's run (CLI start to end).",
            ["account", "model"],
            buckets=RUN_BUCKETS_S,
            registry=reg,
        )
        self.queue_wait_seconds = Histogram(
            "claudeq_queue_wait_seconds",
            "Time from a job's creation (or promotion) until a worker claimed it.",
            buckets=WAIT_BUCKETS_S,
            registry=reg,
        )
        self.runs_in_progress = Gauge(
            "claudeq_runs_in_progress", "Runs in flight in this worker process.", ["account"], registry=reg
        )
        self.tokens = Counter(
            "claudeq_tokens",
            "Tokens used, by type (input|output|cacheRead|cacheCreation), from the SDK's modelUsage.",
            ["account", "model", "type"],
            registry=reg,
        )
        self.cost_usd = Counter(
            "claudeq_cost_usd", "Cost in US dollars as the CLI computed it.", ["account", "model"], registry=reg
        )
        self.rate_limit_events = Counter(
            "claudeq_rate_limit_events",
            "Rate-limit events seen (status allowed|allowed_warning|rejected, per window).",
            ["account", "status", "window"],
            registry=reg,
        )
        self.account_utilization = Gauge(
            "claudeq_account_utilization_ratio",
            "Last utilization (0..1) of an account's rate-limit window seen by this worker.",
            ["account", "window"],
            registry=reg,
        )
        self.retries = Counter("claudeq_retries", "Retries scheduled, by reason.", ["reason"], registry=reg)
        self.tool_calls = Counter("claudeq_tool_calls", "Tool calls made by runs, by tool.", ["tool"], registry=reg)

    def _add_tenant_metrics(self, reg: CollectorRegistry) -> None:
        """What each tenant ran and spent, and the session mirror's errors."""
        self.tenant_runs = Counter(
            "claudeq_tenant_runs",
            "Runs started, by tenant (configured tenants and `default`; any other `other`).",
            ["tenant"],
            registry=reg,
        )
        self.tenant_cost_usd = Counter(
            "claudeq_tenant_cost_usd",
            "Cost in US dollars of finished attempts, by tenant (what its spend caps count).",
            ["tenant"],
            registry=reg,
        )
        self.tenant_tokens_total = Counter(
            "claudeq_tenant_tokens",
            "Tokens of finished attempts, by tenant and type (input|output|cacheRead|cacheCreation).",
            ["tenant", "type"],
            registry=reg,
        )
        self.session_mirror_errors = Counter(
            "claudeq_session_mirror_errors", "Session-store mirror errors reported by the SDK.", registry=reg
        )

    def _add_loop_metrics(self, reg: CollectorRegistry) -> None:
        """The background loops (schedules, notifications) and the pass-through's refusals."""
        self.schedule_ticks = Counter(
            "claudeq_schedule_ticks",
            "Schedule ticks by outcome: fired (a job submitted), missed (no scheduler ran within the grace), refused "
            "(the spec no longer passes submit's checks), failed (the scheduler could not handle it: paused).",
            ["outcome"],
            registry=reg,
        )
        self.loop_item_failures = Counter(
            "claudeq_loop_item_failures",
            "Items a background loop could not handle (promoter, reconciler, scheduler, notifier, archiver), by loop: "
            "the item is left for a later pass (or paused, dead), the loop goes on with the others.",
            ["loop"],
            registry=reg,
        )
        self.notifications = Counter(
            "claudeq_notifications",
            "Notification tries by target (events, webhook, link, link_error) and outcome: delivered, failed (tried "
            "again later), dead (given up on: claudeq webhooks retry).",
            ["target", "outcome"],
            registry=reg,
        )
        self.notification_latency = Histogram(
            "claudeq_notification_latency_seconds",
            "From a job's end to its notification delivered, by target.",
            ["target"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200),
            registry=reg,
        )
        self.passthrough_refused = Counter(
            "claudeq_passthrough_refused",
            "Requests the pass-through answered itself with a 403 instead of forwarding (not a call the CLI makes),"
            " by method and reason (path|method|query).",
            ["method", "reason"],
            registry=reg,
        )

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, found once per series."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    @_never_raise
    def job_finished(self, queue: str, status: str) -> None:
        """Count a job that reached a terminal status."""
        self._child(self.jobs_finished, token_label(queue), token_label(status)).inc()

    @_never_raise
    def attempt(self, account: str, outcome: str) -> None:
        """Count one finished attempt."""
        self._child(self.attempts, token_label(account), token_label(outcome)).inc()

    @_never_raise
    def run_duration(self, account: str, model: str, seconds: float) -> None:
        """Observe one attempt's run time."""
        if seconds >= 0:
            self._child(self.run_duration_seconds, token_label(account), model_label(model)).observe(seconds)

    @_never_raise
    def queue_wait(self, seconds: float) -> None:
        """Observe how long a job waited before it was claimed."""
        self.queue_wait_seconds.observe(max(0.0, seconds))

    @_never_raise
    def run_started(self, account: str) -> None:
        """A run began on `account` in this process."""
        self._child(self.runs_in_progress, token_label(account)).inc()

    @_never_raise
    def run_ended(self, account: str) -> None:
        """A run on `account` in this process ended (pair of `run_started`)."""
        self._child(self.runs_in_progress, token_label(account)).dec()

    @_never_raise
    def usage(self, account: str, usage: Usage) -> None:
        """Add one attempt's tokens (per type) and cost, per canonical model, from `usage.model_usage`."""
        acct = token_label(account)
        if not usage.model_usage:
            # A run killed before its result may only have totals: count them under `other` rather than lose them.
            tokens, cost = self._usage_children(acct, OTHER)
            for child, count in zip(
                tokens,
                (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_creation_tokens),
                strict=True,
            ):
                child.inc(counter_value(count))
            cost.inc(counter_value(usage.cost_usd))
            return
        for model_id, entry in usage.model_usage.items():
            if not isinstance(entry, dict):
                continue
            tokens, cost = self._usage_children(acct, canonical_model(model_id, entry))
            for child, key in zip(tokens, _USAGE_KEYS, strict=True):
                # Every type touched, so each series exists from the first run (dashboards and alerts see a 0).
                child.inc(counter_value(entry.get(key)))
            cost.inc(counter_value(entry.get("costUSD")))

    def _usage_children(self, account: str, model: str) -> tuple[tuple[Any, ...], Any]:
        """The `tokens` children of (`account`, `model`), one per type in TOKEN_TYPES' order, and its `cost_usd`
        child: found once per pair (a job's usage touches five series of each model it used)."""
        key = (account, model)
        found = self._usage_series.get(key)
        if found is None:
            tokens = tuple(self._child(self.tokens, account, model, kind) for kind in TOKEN_TYPES)
            found = self._usage_series[key] = (tokens, self._child(self.cost_usd, account, model))
        return found

    @_never_raise
    def tenant_run(self, tenant: str) -> None:
        """A run of `tenant` (a bounded label: claudeq.config.tenants.Tenants.label) started."""
        self._child(self.tenant_runs, token_label(tenant)).inc()

    @_never_raise
    def tenant_tokens(self, tenant: str, usage: Usage) -> None:
        """Add a finished attempt's tokens to its tenant, per type (every type touched, so each series exists)."""
        label = token_label(tenant)
        children = self._tenant_series.get(label)
        if children is None:
            children = self._tenant_series[label] = tuple(
                self._child(self.tenant_tokens_total, label, kind) for kind in TOKEN_TYPES
            )
        for child, count in zip(
            children,
            (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_creation_tokens),
            strict=True,
        ):
            child.inc(counter_value(count))

    @_never_raise
    def tenant_cost(self, tenant: str, cost_usd: float) -> None:
        """Add a finished attempt's cost to its tenant (touched even at 0, so the series exists)."""
        self._child(self.tenant_cost_usd, token_label(tenant)).inc(counter_value(cost_usd))

    @_never_raise
    def rate_limit_event(self, account: str, signal: RateLimitSignal) -> None:
        """Count a rate-limit event and remember its window's utilization."""
        acct = token_label(account)
        status = signal.status if signal.status in RATE_LIMIT_STATUSES else OTHER
        window = token_label(signal.window)
        self._child(self.rate_limit_events, acct, status, window).inc()
        if signal.utilization is not None and signal.utilization >= 0:
            self._child(self.account_utilization, acct, window).set(signal.utilization)

    @_never_raise
    def retry(self, reason: str) -> None:
        """Count a retry scheduled for `reason` (e.g. server_error, timeout, crash)."""
        self.retries.labels(token_label(reason)).inc()

    @_never_raise
    def tool_call(self, tool: str) -> None:
        """Count one tool call."""
        self._child(self.tool_calls, tool_label(tool, self.known_tools)).inc()

    @_never_raise
    def passthrough_refusal(self, method: str, reason: str) -> None:
        """Count one request the pass-through refused (labels bounded by worker/passthrough/server.py `refusal`)."""
        method = method if method in HTTP_METHODS else OTHER
        self.passthrough_refused.labels(method, reason if reason in REFUSAL_REASONS else OTHER).inc()

    @_never_raise
    def loop_item_failed(self, loop: str) -> None:
        """Count an item a background loop could not handle."""
        known = ("promoter", "reconciler", "scheduler", "notifier", "archiver")
        self.loop_item_failures.labels(loop if loop in known else OTHER).inc()

    @_never_raise
    def schedule_tick(self, outcome: str, n: int = 1) -> None:
        """Count `n` schedule ticks of `outcome` (fired, missed, refused)."""
        self.schedule_ticks.labels(outcome if outcome in ("fired", "missed", "refused", "failed") else OTHER).inc(n)

    @_never_raise
    def notification(self, target: str, outcome: str, latency_s: float | None = None) -> None:
        """Count one try of an end notification; a delivered one also observes how long after the job's end."""
        target = target if target in NOTIFICATION_TARGETS else OTHER
        self.notifications.labels(target, outcome if outcome in ("delivered", "failed", "dead") else OTHER).inc()
        if outcome == "delivered" and latency_s is not None:
            self.notification_latency.labels(target).observe(max(0.0, latency_s))

    @_never_raise
    def mirror_error(self) -> None:
        """Count one session-store mirror error."""
        self.session_mirror_errors.inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Start the /metrics HTTP server (a daemon thread); port 0 picks a free port. Returns the bound port.

        Raises ConfigError when the port is taken: each worker process on a host needs its own port.
        """
        with self._lock:
            if self._server is None:
                try:
                    self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)
                except OSError as exc:
                    raise ConfigError("CLAUDEQ_METRICS_PORT", f"cannot serve metrics on {addr}:{port}: {exc}") from None
            return int(self._server.server_port)

    def close(self) -> None:
        """Stop the /metrics HTTP server, if one runs."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
