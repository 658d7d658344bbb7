"""What the account-slot scripts cost in Redis commands: every `redis.call` inside a script counts in
`INFO commandstats`, so a script that reads the account hash field by field costs a command per field. A private
redis-server, so the counts are ours alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from claudeq.accounts import AccountStore, Waiter
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.keys import Keys
from claudeq.script_calls import run_call
from tests.support.redis_server import command_calls, commands_since, private_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private_redis() -> Iterator[redis.Redis]:
    with private_client() as (client, _):
        yield client


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

    assert run_call(store.acquire_call("a", "job-0", 15.0, rank=0.5)) == 1  # the scripts are loaded (SCRIPT LOAD once)
    assert run_call(store.release_call("a", "job-0")) == []

    def cost(call: Callable[[], object], expected: object) -> dict[str, int]:
        before = command_calls(private_redis)
        assert call() == expected
        return commands_since(private_redis, before)

    # A job's first acquire (it holds no slot anywhere): the script, the state (one HMGET of the admission fields,
    # one of the windows' readings, nothing field by field), the live slots counted, the slot, the counter. No look
    # for a slot it holds, no drop of expired ones (the promoter's pass drops those), no look at the lines while
    # nobody joined one (the account's `wq`).
    first = cost(lambda: run_call(store.acquire_call("a", "job-1", 15.0, rank=1.0, may_hold=False)), 1)
    assert first == {"evalsha": 1, "hmget": 2, "zcount": 1, "zadd": 1, "hincrby": 1}, first
    # One that may hold a slot (a redelivery) looks for it, after dropping expired slots.
    again = cost(lambda: run_call(store.acquire_call("a", "job-1", 15.0, rank=1.0)), 1)
    assert again == {"evalsha": 1, "zremrangebyscore": 1, "hmget": 2, "zscore": 1, "zcard": 1, "zadd": 1}, again
    # A release with nobody in line: the script, the slot freed, the look at the lines.
    release = cost(lambda: run_call(store.release_call("a", "job-1")), [])
    assert release == {"evalsha": 1, "zrem": 1, "exists": 1}, release

    # With a waiter in line, the release reads the state once and hands the slot over.
    for i in range(4):
        assert run_call(store.acquire_call("a", f"full-{i}", 15.0, rank=0.1, may_hold=False)) == 1
    private_redis.hset(store.keys.job("waiter"), "status", "deferred")
    run_call(store.add_waiter_call(["a"], Waiter("waiter", rank=2.0)))
    handed = cost(lambda: run_call(store.release_call("a", "full-0")), ["waiter"])
    assert handed["hmget"] == 2, handed  # the state read once however many lines it looks at

    # The lines were looked at because a job joined one (`wq`); found empty (the waiter was served), the flag goes,
    # and the next acquire looks no more.
    run_call(store.release_call("a", "full-1"))
    looked = cost(lambda: run_call(store.acquire_call("a", "job-2", 15.0, rank=1.0, may_hold=False)), 1)
    assert looked["exists"] == 1 and looked["hdel"] == 1, looked
    run_call(store.release_call("a", "full-2"))
    clear = cost(lambda: run_call(store.acquire_call("a", "job-3", 15.0, rank=1.0, may_hold=False)), 1)
    assert "exists" not in clear and "hdel" not in clear, clear
