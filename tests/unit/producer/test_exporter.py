"""The exporter's collector: every cluster gauge read from (fake) Redis at scrape time."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import fakeredis
import pytest
import redis
from prometheus_client import CollectorRegistry, start_http_server
from redis.backoff import NoBackoff
from redis.retry import Retry

from claudeq.accounts import AccountStore
from claudeq.broker import queue_lists
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.jobs import JobStore
from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.metrics.exporter import ClusterCollector

NOW = 1_800_000_000.0
POOL = AccountPool(
    accounts=[
        AccountConfig(
            name="alpha", kind="oauth", token_env="TOKEN_ALPHA", max_concurrency=3, ceilings={"five_hour": 0.8}
        ),
        AccountConfig(name="beta", kind="api_key", token_env="TOKEN_BETA"),
    ]
)


def scrape(collector: ClusterCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


@pytest.fixture
def collector(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> ClusterCollector:
    return ClusterCollector(fake_settings, fake_redis, pool=POOL, now=lambda: NOW)


@pytest.fixture
def keys(fake_settings: Settings) -> Keys:
    return Keys(fake_settings.key_prefix)


class CountingRedis(fakeredis.FakeRedis):
    """A fakeredis client that counts the commands it is sent (pipelines included)."""

    commands: list[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]))
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        self.commands.append("PIPELINE")
        return super().pipeline(transaction, shard_hint)


def test_registering_does_not_touch_redis(fake_settings: Settings) -> None:
    client = CountingRedis()
    registry = CollectorRegistry()
    registry.register(ClusterCollector(fake_settings, client, pool=POOL))
    assert client.commands == []  # registering (describe) read nothing
    assert registry.get_sample_value("claudeq_exporter_redis_up") == 1  # a scrape does read Redis
    assert client.commands


def test_redis_down_reports_up_zero_and_nothing_else(fake_settings: Settings) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    registry = scrape(ClusterCollector(fake_settings, dead, pool=POOL))
    assert registry.get_sample_value("claudeq_exporter_redis_up") == 0
    assert registry.get_sample_value("claudeq_queue_depth", {"queue": fake_settings.queue}) is None


def test_queue_depth_counts_every_priority_list(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, fake_settings: Settings
) -> None:
    queue = fake_settings.queue
    fake_redis.rpush(queue, "m1", "m2")
    fake_redis.rpush(f"{queue}\x06\x163", "m3")
    fake_redis.rpush(f"{queue}\x06\x169", "m4")
    fake_redis.rpush("some-other-queue", "x")
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_exporter_redis_up") == 1
    assert registry.get_sample_value("claudeq_queue_depth", {"queue": queue}) == 4


def test_queue_lists_match_kombu_priority_names() -> None:
    from kombu.transport.redis import Channel

    names = queue_lists("q")
    channel: Any = Channel.__new__(Channel)  # only the naming helpers are used: no connection
    for step in Channel.priority_steps:
        assert channel._q_for_pri("q", step) in names


def test_jobs_by_status_include_zeros(collector: ClusterCollector, fake_store: JobStore) -> None:
    for i in range(3):
        run_call(
            fake_store.create_call(
                JobRecord(id=f"j{i}", spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow())
            )
        )
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_jobs", {"status": "queued"}) == 3
    assert registry.get_sample_value("claudeq_jobs", {"status": "failed"}) == 0


def test_deferred_count_and_earliest_ready(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_deferred_jobs") == 0
    assert registry.get_sample_value("claudeq_deferred_earliest_ready_timestamp_seconds") is None
    fake_redis.zadd(keys.deferred, {"a": NOW + 60, "b": NOW + 5})
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_deferred_jobs") == 2
    assert registry.get_sample_value("claudeq_deferred_earliest_ready_timestamp_seconds") == NOW + 5


def _state(registry: CollectorRegistry, account: str) -> str:
    on = [
        s
        for s in ("ok", "warning", "cooling", "reserved", "disabled")
        if registry.get_sample_value("claudeq_account_state", {"account": account, "state": s}) == 1
    ]
    assert len(on) == 1, on
    return on[0]


def test_account_state_is_one_hot_with_cooldown_remaining(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    fake_redis.hset(keys.account("alpha"), mapping={"cooldown_until": NOW + 90, "cooldown_reason": "429"})
    registry = scrape(collector)
    assert _state(registry, "alpha") == "cooling"
    assert _state(registry, "beta") == "ok"
    assert registry.get_sample_value("claudeq_account_cooldown_seconds", {"account": "alpha"}) == 90
    assert registry.get_sample_value("claudeq_account_cooldown_seconds", {"account": "beta"}) == 0


def test_expired_cooldown_is_ok_and_disabled_wins(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    fake_redis.hset(keys.account("alpha"), mapping={"cooldown_until": NOW - 1})
    fake_redis.hset(keys.account("beta"), mapping={"state": "disabled", "cooldown_until": NOW + 10})
    registry = scrape(collector)
    assert _state(registry, "alpha") == "ok"
    assert _state(registry, "beta") == "disabled"


def test_utilization_per_window_and_warning_state(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    window = {"status": "allowed_warning", "utilization": 0.91, "type": "five_hour"}
    fake_redis.hset(keys.account("alpha"), mapping={"state": "warning", "warn_window": "five_hour"})
    fake_redis.hset(keys.account("alpha"), "w:five_hour", json.dumps(window))
    fake_redis.hset(keys.account("alpha"), "w:seven_day", json.dumps({"status": "allowed", "utilization": 0.4}))
    registry = scrape(collector)
    util = "claudeq_account_utilization_ratio"
    assert registry.get_sample_value(util, {"account": "alpha", "window": "five_hour"}) == pytest.approx(0.91)
    assert registry.get_sample_value(util, {"account": "alpha", "window": "seven_day"}) == pytest.approx(0.4)
    assert _state(registry, "alpha") == "warning"


def test_reserved_accounts_their_windows_and_ceilings(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    window = {"status": "allowed", "utilization": 0.85, "resets_at": NOW + 30}
    fake_redis.hset(keys.account("alpha"), "w:five_hour", json.dumps(window))
    fake_redis.hset(keys.account("alpha"), mapping={"pws": "five_hour", "pu:five_hour": f"0.85 {NOW + 30} 0 0.8 - 1"})
    fake_redis.hset(keys.account("beta"), "w:seven_day_opus", json.dumps({**window, "utilization": 0.5}))
    fake_redis.hset(
        keys.account("beta"),
        mapping={"pws": "seven_day_opus", "pu:seven_day_opus": f"0.5 {NOW + 30} 0.2 1 opus 1"},
    )
    registry = scrape(collector)
    assert _state(registry, "alpha") == "reserved"
    assert (
        registry.get_sample_value("claudeq_account_reserved_seconds", {"account": "alpha", "window": "five_hour"}) == 30
    )
    assert (
        registry.get_sample_value("claudeq_account_ceiling_ratio", {"account": "alpha", "window": "five_hour"}) == 0.8
    )
    # Predicted only (0.5 + 1 * 0.2 is under 1): beta is ok, not held, nothing reserved.
    assert _state(registry, "beta") == "ok"
    assert registry.get_sample_value("claudeq_account_held", {"account": "beta"}) == 0
    assert (
        registry.get_sample_value("claudeq_account_ceiling_ratio", {"account": "beta", "window": "seven_day_opus"}) == 1
    )


def test_remaining_limits_resets_and_holds_per_account(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    window = {"status": "allowed", "utilization": 0.5, "limit": 6, "remaining": 3, "resets_at": NOW + 12}
    fake_redis.hset(keys.account("alpha"), "w:requests", json.dumps(window))
    fake_redis.hset(keys.account("alpha"), mapping={"rq_rem": 0, "rq_reset": NOW + 12, "rq_lim": 6})
    registry = scrape(collector)
    labels = {"account": "alpha", "window": "requests"}
    assert registry.get_sample_value("claudeq_account_remaining", labels) == 3
    assert registry.get_sample_value("claudeq_account_window_limit", labels) == 6
    assert registry.get_sample_value("claudeq_account_reset_seconds", labels) == pytest.approx(12, abs=0.01)
    assert registry.get_sample_value("claudeq_account_held", {"account": "alpha"}) == 1
    assert registry.get_sample_value("claudeq_account_held", {"account": "beta"}) == 0


def test_slots_in_use_ignore_expired_leases(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    fake_redis.zadd(keys.account_slots("alpha"), {"j1": NOW + 10, "j2": NOW + 20, "dead": NOW - 5})
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_account_slots_in_use", {"account": "alpha"}) == 2
    assert registry.get_sample_value("claudeq_account_slots_in_use", {"account": "beta"}) == 0
    assert registry.get_sample_value("claudeq_account_slots_max", {"account": "alpha"}) == 3


def test_workers_live_and_stale_from_heartbeats(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    fake_redis.zadd(keys.workers, {"w1": NOW - 1, "w2": NOW - 2, "gone": NOW - 3600})
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_workers", {"state": "live"}) == 2
    assert registry.get_sample_value("claudeq_workers", {"state": "stale"}) == 1


def test_every_scrape_reads_redis_afresh(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, fake_settings: Settings
) -> None:
    registry = scrape(collector)
    assert registry.get_sample_value("claudeq_queue_depth", {"queue": fake_settings.queue}) == 0
    fake_redis.rpush(fake_settings.queue, "m")
    assert registry.get_sample_value("claudeq_queue_depth", {"queue": fake_settings.queue}) == 1


def test_served_over_http(collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys) -> None:
    fake_redis.zadd(keys.workers, {"w1": NOW})
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=scrape(collector))
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'claudeq_workers{state="live"} 1.0' in body
    assert 'claudeq_account_state{account="beta",state="ok"} 1.0' in body


def test_states_written_by_the_account_store_are_exported(
    collector: ClusterCollector, fake_redis: fakeredis.FakeRedis, keys: Keys
) -> None:
    store = AccountStore(fake_redis, keys, POOL)
    store.disable("beta", "authentication_failed")
    store.cool("alpha", datetime.fromtimestamp(NOW + 30, UTC), "five_hour rejected")
    registry = scrape(collector)
    assert _state(registry, "alpha") == "cooling"
    assert _state(registry, "beta") == "disabled"
    assert registry.get_sample_value("claudeq_account_cooldown_seconds", {"account": "alpha"}) == pytest.approx(30)
