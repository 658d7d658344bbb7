"""`claudeq exporter`: cluster-wide gauges read from Redis at scrape time (docs/metrics.md).

One exporter serves the whole fleet; workers serve their own per-process counters. Nothing is polled in the
background: every scrape reads Redis afresh, so the numbers are never older than the scrape itself.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

import redis
import typer
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.backoff import NoBackoff
from redis.retry import Retry

from claudeq import approvals, connections
from claudeq.accounts import AccountStore
from claudeq.broker import KOMBU_PRIORITIES, queue_lists
from claudeq.errors import ConfigError
from claudeq.jobs import status_counts
from claudeq.keys import Keys
from claudeq.models import JobStatus
from claudeq.tenants import TenantStore

from ...config.account_pool import AccountPool
from ...config.settings import Settings, load_settings
from ...producer.client import make_store

log = logging.getLogger(__name__)

#: Every job status, so each `claudeq_jobs{status}` series exists (as 0) from the first scrape.
JOB_STATUSES: tuple[JobStatus, ...] = ("waiting", "queued", "deferred", "running", "succeeded", "failed", "cancelled")
#: Every account state, so `claudeq_account_state{state}` is a full one-hot set per account.
ACCOUNT_STATES: tuple[str, ...] = ("ok", "warning", "cooling", "reserved", "disabled")
DEFAULT_PORT = 9809  # workers use 9808 (.env.example); also claudeq.producer.cli.EXPORTER_PORT


class ClusterCollector(Collector):
    """Reads queues, jobs, accounts and worker heartbeats from Redis on every `collect()`."""

    def __init__(
        self,
        settings: Settings,
        client: redis.Redis,
        *,
        pool: AccountPool | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.key_prefix)
        self.store = make_store(settings, client)
        # The accounts come from the pool (the same accounts file the workers read); their state from Redis.
        self.accounts = AccountStore(client, self.keys, pool if pool is not None else settings.accounts)
        self.slots = sum(a.max_concurrency for a in self.accounts.pool.accounts)  # the fleet's (reserve_share)
        self.tenants = TenantStore(
            client, self.keys, settings.tenants, accounts=[a.name for a in self.accounts.pool.accounts]
        )
        self.now = now
        # A worker whose last heartbeat is older than its lease TTL has stopped renewing its leases.
        self.stale_after_s = max(settings.lease_ttl_s, 3 * settings.heartbeat_s)

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not touch Redis."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Read Redis now and yield every cluster gauge; a Redis failure yields only `claudeq_exporter_redis_up 0`.
        A section that cannot be read for another reason (a value in Redis this version cannot handle) is left out
        of this scrape and named in `claudeq_exporter_section_failed`; the other sections are still served."""
        started = time.perf_counter()
        up = GaugeMetricFamily("claudeq_exporter_redis_up", "1 when the exporter could read Redis for this scrape.")
        failed = GaugeMetricFamily(
            "claudeq_exporter_section_failed",
            "1 for a section of this scrape (queues, jobs, deferred, approvals, accounts, tenants, workers) that could "
            "not be read for another reason than Redis (its gauges are missing from this scrape).",
            labels=["section"],
        )
        sections: list[tuple[str, Callable[[], list[Metric]]]] = [
            ("queues", self._queues),
            ("jobs", self._jobs),
            ("deferred", self._deferred),
            ("approvals", self._approvals),
            ("accounts", self._accounts),
            ("tenants", self._tenants),
            ("workers", self._workers),
        ]
        families: list[Metric] = []
        try:
            for name, read in sections:
                try:
                    families += read()
                except redis.RedisError:
                    raise
                except Exception as exc:  # one section's bad value never costs the others their scrape
                    log.warning("exporter: the %s section failed (%s: %s)", name, type(exc).__name__, exc)
                    failed.add_metric([name], 1)
        except redis.RedisError as exc:
            log.warning("exporter: cannot read Redis: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield failed
        yield from families
        took = GaugeMetricFamily("claudeq_exporter_scrape_duration_seconds", "Time this scrape spent reading Redis.")
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _queues(self) -> list[Metric]:
        depth = GaugeMetricFamily(
            "claudeq_queue_depth", "Messages waiting in a Celery queue (all priorities).", labels=["queue"]
        )
        queues = self.settings.job_queues
        pipe = self.redis.pipeline(transaction=False)
        for queue in queues:
            for name in queue_lists(queue):
                pipe.llen(name)
        lengths = pipe.execute()
        per_queue = len(KOMBU_PRIORITIES) + 1
        for i, queue in enumerate(queues):
            depth.add_metric([queue], sum(int(n) for n in lengths[i * per_queue : (i + 1) * per_queue]))
        return [depth]

    def _jobs(self) -> list[Metric]:
        jobs = GaugeMetricFamily("claudeq_jobs", "Retained jobs by status.", labels=["status"])
        counts = status_counts(self.redis, self.keys, self.now())
        for status in JOB_STATUSES:
            jobs.add_metric([status], counts.get(status, 0))
        return [jobs]

    def _approvals(self) -> list[Metric]:
        waiting = GaugeMetricFamily(
            "claudeq_jobs_waiting_approval",
            "Jobs waiting for a person's decision on a tool use (docs/jobs.md#tool-approval), by tenant.",
            labels=["tenant"],
        )
        by_tenant: dict[str, int] = {}
        for record in approvals.waiting(self.store):
            label = self.settings.tenants.label(record.spec.tenant)
            by_tenant[label] = by_tenant.get(label, 0) + 1
        for tenant, count in sorted(by_tenant.items()):
            waiting.add_metric([tenant], count)
        return [waiting]

    def _deferred(self) -> list[Metric]:
        count = GaugeMetricFamily("claudeq_deferred_jobs", "Jobs waiting in the deferred set (rate limit, no slot).")
        earliest = GaugeMetricFamily(
            "claudeq_deferred_earliest_ready_timestamp_seconds",
            "Epoch time the earliest deferred job becomes ready (absent when none is deferred).",
        )
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.keys.deferred)
        pipe.zrange(self.keys.deferred, 0, 0, withscores=True)
        total, head = pipe.execute()
        count.add_metric([], int(total))
        if head:
            earliest.add_metric([], float(head[0][1]))
        return [count, earliest]

    def _accounts(self) -> list[Metric]:
        state = GaugeMetricFamily(
            "claudeq_account_state",
            "1 for the account's current state (ok|warning|cooling|reserved|disabled), 0 for the others.",
            labels=["account", "state"],
        )
        cooldown = GaugeMetricFamily(
            "claudeq_account_cooldown_seconds",
            "Seconds until the account's cooldown ends (0 when not cooling).",
            labels=["account"],
        )
        utilization = GaugeMetricFamily(
            "claudeq_account_utilization_ratio",
            "Last utilization (0..1) seen per rate-limit window.",
            labels=["account", "window"],
        )
        slots = GaugeMetricFamily("claudeq_account_slots_in_use", "Slots leased on the account.", labels=["account"])
        limit = GaugeMetricFamily("claudeq_account_slots_max", "The account's max concurrency.", labels=["account"])
        remaining = GaugeMetricFamily(
            "claudeq_account_remaining",
            "What the API last said is left in a window (API-key families: requests, tokens, input_tokens, "
            "output_tokens), read from response headers by the workers' pass-through.",
            labels=["account", "window"],
        )
        window_limit = GaugeMetricFamily(
            "claudeq_account_window_limit",
            "The limit of a window, as the API reported it.",
            labels=["account", "window"],
        )
        resets = GaugeMetricFamily(
            "claudeq_account_reset_seconds",
            "Seconds until a rate-limit window resets (0 once it has).",
            labels=["account", "window"],
        )
        held = GaugeMetricFamily(
            "claudeq_account_held",
            "1 while the account holds new runs back: what the API said is left is spoken for by the runs in flight, "
            "or they would likely take a window past its ceiling.",
            labels=["account"],
        )
        ceiling = GaugeMetricFamily(
            "claudeq_account_ceiling_ratio",
            "The utilization ceiling of a window (the account's utilization_ceiling or its [ceilings] entry).",
            labels=["account", "window"],
        )
        reserved = GaugeMetricFamily(
            "claudeq_account_reserved_seconds",
            "Seconds until a window at its utilization ceiling resets (the account, or for a model family's own "
            "window that family, takes no new run until then); absent when none is.",
            labels=["account", "window"],
        )
        now = self.now()
        for account in self.accounts.states(now):
            for name in ACCOUNT_STATES:
                state.add_metric([account.name, name], 1 if account.state == name else 0)
            until = account.cooldown_until.timestamp() if account.cooldown_until else 0.0
            cooldown.add_metric([account.name], max(0.0, until - now))
            config = self.accounts.pool.get(account.name)
            for window, info in account.windows.items():
                if info.utilization is not None:
                    utilization.add_metric([account.name, window], info.utilization)
                    if config is not None:
                        ceiling.add_metric([account.name, window], config.ceiling(window))
                if info.remaining is not None:
                    remaining.add_metric([account.name, window], info.remaining)
                if info.limit is not None:
                    window_limit.add_metric([account.name, window], info.limit)
                if info.resets_at is not None:
                    resets.add_metric([account.name, window], max(0.0, info.resets_at.timestamp() - now))
            slots.add_metric([account.name], account.slots_in_use)
            limit.add_metric([account.name], account.max_concurrency)
            predicted = any(r.predicted for r in account.reservations)
            held.add_metric([account.name], 1 if account.held_until is not None or predicted else 0)
            for r in account.reservations:
                if not r.predicted:
                    reserved.add_metric([account.name, r.window], max(0.0, r.until.timestamp() - now))
        return [state, cooldown, utilization, slots, limit, remaining, window_limit, resets, held, ceiling, reserved]

    def _tenants(self) -> list[Metric]:
        in_flight = GaugeMetricFamily(
            "claudeq_tenant_runs_in_flight", "The tenant's runs in flight, fleet-wide.", labels=["tenant"]
        )
        max_concurrency = GaugeMetricFamily(
            "claudeq_tenant_max_concurrency", "The tenant's max_concurrency (absent: no cap).", labels=["tenant"]
        )
        share_cap = GaugeMetricFamily(
            "claudeq_tenant_share_cap",
            "The tenant's share of the fleet's slots under reserve_share now (absent: reserve_share off).",
            labels=["tenant"],
        )
        balance = GaugeMetricFamily(
            "claudeq_tenant_share_balance_slot_seconds",
            "The tenant's catch-up balance under reserve_share (+ owed, - owing; absent: none kept).",
            labels=["tenant"],
        )
        waiting = GaugeMetricFamily(
            "claudeq_tenant_jobs_waiting",
            "The tenant's jobs queued or deferred (not finished, not running).",
            labels=["tenant"],
        )
        spend = GaugeMetricFamily(
            "claudeq_tenant_spend_usd",
            "Dollars the tenant's runs spent in the current calendar window (hour, day; UTC).",
            labels=["tenant", "window"],
        )
        cap = GaugeMetricFamily(
            "claudeq_tenant_cost_cap_usd",
            "The tenant's spend cap per window (absent: no cap).",
            labels=["tenant", "window"],
        )
        account_spend = GaugeMetricFamily(
            "claudeq_account_spend_usd",
            "Dollars the account's runs spent in the current calendar window (hour, day; UTC).",
            labels=["account", "window"],
        )
        account_cap = GaugeMetricFamily(
            "claudeq_account_cost_cap_usd",
            "The account's spend cap per window (absent: no cap).",
            labels=["account", "window"],
        )
        now = self.now()
        for usage in self.tenants.usage(now, slots=self.slots):
            in_flight.add_metric([usage.name], usage.in_flight)
            waiting.add_metric([usage.name], usage.waiting)
            if usage.max_concurrency is not None:
                max_concurrency.add_metric([usage.name], usage.max_concurrency)
            if usage.share_cap is not None:
                share_cap.add_metric([usage.name], usage.share_cap)
            if usage.balance is not None:
                balance.add_metric([usage.name], usage.balance)
            for window, spent, limit in (
                ("hour", usage.spend.hour, usage.spend.cap_hour),
                ("day", usage.spend.day, usage.spend.cap_day),
            ):
                spend.add_metric([usage.name, window], spent)
                if limit is not None:
                    cap.add_metric([usage.name, window], limit)
        for account in self.accounts.pool.accounts:
            hour, day = self.tenants.spend("account", account.name, now)
            for window, spent, limit in (
                ("hour", hour, account.max_cost_usd_per_hour),
                ("day", day, account.max_cost_usd_per_day),
            ):
                account_spend.add_metric([account.name, window], spent)
                if limit is not None:
                    account_cap.add_metric([account.name, window], limit)
        return [in_flight, max_concurrency, share_cap, balance, waiting, spend, cap, account_spend, account_cap]

    def _workers(self) -> list[Metric]:
        workers = GaugeMetricFamily("claudeq_workers", "Workers by heartbeat freshness (live|stale).", labels=["state"])
        cutoff = self.now() - self.stale_after_s
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcount(self.keys.workers, f"({cutoff}", "+inf")
        pipe.zcount(self.keys.workers, "-inf", cutoff)
        live, stale = pipe.execute()
        workers.add_metric(["live"], int(live))
        workers.add_metric(["stale"], int(stale))
        return [workers]


def build_registry(settings: Settings, client: redis.Redis | None = None) -> CollectorRegistry:
    """A registry holding only the cluster collector (no process metrics: those belong to the workers)."""
    registry = CollectorRegistry()
    # Short timeouts and one quick retry: a scrape must answer (with redis_up 0) before Prometheus gives up on it.
    conn = client or connections.sync_client(
        settings, socket_timeout=3, socket_connect_timeout=3, retry=Retry(NoBackoff(), 1)
    )
    registry.register(ClusterCollector(settings, conn))
    return registry


def serve(settings: Settings, port: int, addr: str = "127.0.0.1") -> tuple[int, Callable[[], None]]:
    """Serve /metrics on `port` (0 = a free one); returns the bound port and a function that stops the server."""
    registry = build_registry(settings)
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigError("--port", f"cannot serve on {addr}:{port}: {exc}") from None

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return int(server.server_port), stop


def exporter_command(port: int = DEFAULT_PORT, addr: str = "127.0.0.1") -> None:
    """Serve cluster-wide gauges (queues, jobs, accounts, workers) read from Redis at scrape time, until a signal.

    `claudeq exporter` (claudeq.producer.cli) declares the options and calls this."""
    try:
        settings = load_settings()
        # Account names come from the pool; touching it now turns a bad accounts file into a start-up error.
        names = settings.accounts.names
        bound, stop = serve(settings, port, addr)
    except ConfigError as exc:
        typer.echo(f"claudeq exporter: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"claudeq exporter: serving /metrics on {addr}:{bound} for accounts {', '.join(names) or '(none)'}")
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    # As PID 1 in a container, SIGTERM without a handler is ignored: handle it so `docker stop` is quick.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    done.wait()
    stop()
