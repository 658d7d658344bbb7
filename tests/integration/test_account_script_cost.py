"""What the account-slot scripts cost in Redis commands: every `redis.call` inside a script counts in
`INFO commandstats`, so a script that reads the account hash field by field costs a command per field. A private
redis-server, so the counts are ours alone."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.account_state import AccountStore
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.keys import Keys
from tests.support.redis_server import PrivateRedis, command_calls, commands_since

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private_redis() -> Iterator[redis.Redis]:
    server = PrivateRedis()
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def test_acquire_and_release_read_the_account_state_once(private_redis: redis.Redis) -> None:
    account = AccountConfig(
        name="a", kind="oauth", token_env="TOKEN_A", max_concurrency=4, ceilings={"five_hour": 0.8}, ramp_starts_per_s=2
    )
    store = AccountStore(private_redis, Keys("cost:"), AccountPool(accounts=[account]))
    now = time.time()
    # Readings admission decides on: request and token limits, two utilization windows (nothing held or reserved).
    store.record_limits(
        "a", {}, requests=(50, now + 60, 60), tokens=(9000, now + 60, 10000), tokens_per_request=100.0, success=True
    )
    store.record_utilization("a", [("five_hour", 0.1, now + 3600), ("seven_day", 0.2, now + 86400)])

    assert store.try_acquire("a", "job-0", 15.0, rank=0.5) == 1  # the scripts are loaded (SCRIPT LOAD once)
    assert store.release("a", "job-0") == []

    before = command_calls(private_redis)
    assert store.try_acquire("a", "job-1", 15.0, rank=1.0) == 1
    acquire = commands_since(private_redis, before)
    before = command_calls(private_redis)
    assert store.release("a", "job-1") == []
    release = commands_since(private_redis, before)

    # One HMGET of the admission fields, one of the windows' readings; nothing field by field.
    assert acquire.get("hget", 0) == 0 and acquire["hmget"] == 2, acquire
    assert release.get("hget", 0) == 0 and release["hmget"] == 2, release
    # acquire: the script, expired slots dropped, the job's slot, the count, the state, the lines, the slot taken,
    # the counter; release: the script, the slot freed, expired slots dropped, the state, the count, the lines.
    assert sum(acquire.values()) <= 10, acquire
    assert sum(release.values()) <= 7, release
