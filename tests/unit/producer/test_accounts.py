"""AccountStore on fakeredis (with Lua): the slot semaphore, waiters, cooldowns, state reads and operator writes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest

from claudeq.accounts import AccountStore, Waiter
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.errors import UnknownAccount
from claudeq.keys import Keys
from claudeq.models import WindowInfo
from claudeq.script_calls import run_call

KEYS = Keys("t:")


@pytest.fixture
def store(fake_redis: fakeredis.FakeRedis) -> AccountStore:
    pool = AccountPool(
        accounts=[
            AccountConfig(name="a", kind="oauth", token_env="TOKEN_A", max_concurrency=2),
            AccountConfig(name="b", kind="api_key", token_env="TOKEN_B", max_concurrency=1),
        ]
    )
    return AccountStore(fake_redis, KEYS, pool)


def test_acquire_respects_max_concurrency(store: AccountStore) -> None:
    assert run_call(store.acquire_call("a", "j1", 10)) == 1
    assert run_call(store.acquire_call("a", "j2", 10)) == 1
    assert run_call(store.acquire_call("a", "j3", 10)) == 0
    assert set(store.slot_holders("a")) == {"j1", "j2"}
    assert store.state("a").slots_in_use == 2


def test_acquire_is_idempotent_per_job(store: AccountStore) -> None:
    assert run_call(store.acquire_call("b", "j1", 10)) == 1
    assert run_call(store.acquire_call("b", "j1", 10)) == 1
    assert store.slot_holders("b").keys() == {"j1"}
    assert store.state("b").counters["acquired"] == 1


def test_expired_slots_free_themselves(store: AccountStore) -> None:
    now = time.time()
    assert run_call(store.acquire_call("b", "dead", 5, now=now)) == 1
    assert run_call(store.acquire_call("b", "j2", 5, now=now + 1)) == 0
    assert store.state("b", now=now + 6).slots_in_use == 0
    assert run_call(store.acquire_call("b", "j2", 5, now=now + 6)) == 1
    assert store.slot_holders("b", now=now + 6).keys() == {"j2"}


def test_the_snapshot_counts_live_slots_and_reports_the_earliest_live_expiry(store: AccountStore) -> None:
    now = time.time()
    assert run_call(store.acquire_call("a", "late", 30, now=now)) == 1
    assert run_call(store.acquire_call("a", "soon", 8, now=now)) == 1
    store.redis.zadd(KEYS.account_slots("a"), {"dead": now - 5})  # expired, not yet swept: neither counted nor first
    (a, a_free), (b, b_free) = run_call(store.snapshot_call(now))
    assert (a.name, a.slots_in_use, b.slots_in_use) == ("a", 2, 0)
    assert a_free == datetime.fromtimestamp(now + 8, UTC) and b_free is None


def test_refresh_extends_only_a_held_slot(store: AccountStore) -> None:
    now = time.time()
    run_call(store.acquire_call("b", "j1", 5, now=now))
    assert store.refresh("b", "j1", 60, now=now)
    assert run_call(store.acquire_call("b", "j2", 5, now=now + 30)) == 0  # j1's slot was extended past +30
    assert not store.refresh("b", "nobody", 60)
    assert "nobody" not in store.slot_holders("b")


def test_acquire_refuses_a_cooling_or_disabled_account(store: AccountStore) -> None:
    store.cool("a", datetime.now(UTC) + timedelta(seconds=30), "rate limited")
    assert run_call(store.acquire_call("a", "j1", 10)) == -2
    store.clear_cooldown("a")
    store.disable("a", "401")
    assert run_call(store.acquire_call("a", "j1", 10)) == -1
    store.enable("a")
    assert run_call(store.acquire_call("a", "j1", 10)) == 1


def _defer(fake_redis: fakeredis.FakeRedis, *job_ids: str, ready: float = 0.0) -> None:
    for job_id in job_ids:
        fake_redis.hset(KEYS.job(job_id), "status", "deferred")
        fake_redis.zadd(KEYS.deferred, {job_id: ready or time.time() + 60})


def test_release_hands_the_slot_to_the_best_ranked_deferred_waiter(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    assert run_call(store.acquire_call("b", "j1", 10)) == 1
    _defer(fake_redis, "w2", "w3", "w9")
    fake_redis.hset(KEYS.job("w1"), "status", "queued")
    now = time.time()
    assert run_call(store.add_waiter_call(["b"], Waiter("w9", rank=9e10 + now), now=now)) == []  # priority 9, oldest
    assert run_call(store.add_waiter_call(["b"], Waiter("w1", rank=1.0), now=now)) == []  # not deferred: never joins
    assert run_call(store.add_waiter_call(["b"], Waiter("w3", rank=now + 2), now=now)) == []
    assert run_call(store.add_waiter_call(["b"], Waiter("w2", rank=now + 1), now=now)) == []
    # Already in line: it keeps its place.
    assert run_call(store.add_waiter_call(["b"], Waiter("w2", rank=now + 5), now=now)) == []
    assert store.waiters("b") == ["w2", "w3", "w9"]
    # The slot goes to w2 (priority 0, older than w3), in the same step: it holds the slot and is queued.
    assert run_call(store.release_call("b", "j1")) == ["w2"]
    assert set(store.slot_holders("b")) == {"w2"}
    assert fake_redis.hget(KEYS.job("w2"), "status") == b"queued"
    assert fake_redis.zscore(KEYS.deferred, "w2") is None
    assert fake_redis.zscore(KEYS.queued, "w2") is not None
    assert (fake_redis.zcard(KEYS.deferred), fake_redis.zcard(KEYS.queued)) == (2, 1)
    assert store.waiters("b") == ["w3", "w9"]
    # Its claim finds the slot handed over (refreshed, not a second one).
    assert run_call(store.acquire_call("b", "w2", 10, rank=now + 1)) == 1
    assert run_call(store.release_call("b", "w2")) == ["w3"]
    fake_redis.hset(KEYS.job("w9"), "status", "cancelled")  # gone meanwhile: dropped, nobody admitted
    assert run_call(store.release_call("b", "w3")) == []
    assert store.waiters("b") == []
    assert store.slot_holders("b") == {}


def _in_line(client: fakeredis.FakeRedis, account: str, members: dict[str, float]) -> None:
    """Put jobs in an account's line as ADD_WAITER does (without its admit): the entries and the account's `wq`."""
    client.zadd(KEYS.account_waiters(account), members)
    client.hset(KEYS.account(account), "wq", "1")


def test_a_new_job_yields_the_free_slot_to_better_ranked_waiters(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    _defer(fake_redis, "urgent")
    _in_line(fake_redis, "a", {"urgent": 5.0, "stale": 1.0})  # stale: not deferred any more
    assert (
        run_call(store.acquire_call("a", "bulk", 10, now=now, rank=9e10)) == 1
    )  # two slots, one waiter ahead: one is free
    assert (
        run_call(store.acquire_call("a", "bulk2", 10, now=now, rank=9e10)) == -4
    )  # the last free slot is the waiter's
    assert store.waiters("a") == ["urgent"]  # the stale entry was dropped on the way
    assert run_call(store.acquire_call("a", "early", 10, now=now, rank=1.0)) == 1  # ranked before it: takes the slot
    assert run_call(store.release_call("a", "early")) == ["urgent"]  # and the next slot to free is the waiter's
    # Without a rank (no waiting line consulted) only capacity counts.
    _defer(fake_redis, "late")
    _in_line(fake_redis, "a", {"late": 2.0})
    run_call(store.release_call("a", "bulk"))  # handed to `late`
    run_call(store.release_call("a", "late"))  # nobody left in line: free
    assert run_call(store.acquire_call("a", "other", 10, now=now)) == 1


def test_release_on_a_cooling_account_admits_nobody(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    run_call(store.acquire_call("a", "j1", 10))
    run_call(store.acquire_call("a", "j2", 10))
    _defer(fake_redis, "w1")
    assert run_call(store.add_waiter_call(["a"], Waiter("w1", rank=1.0))) == []
    store.cool("a", datetime.now(UTC) + timedelta(seconds=30), "rejected")
    assert run_call(store.release_call("a", "j1")) == []
    assert store.waiters("a") == ["w1"]
    assert set(store.slot_holders("a")) == {"j2"}
    # Once the cooldown is over, the promoter's pass admits it.
    assert run_call(store.admit_call("a", now=time.time() + 31)) == ["w1"]


def test_cooldown_is_never_shortened(store: AccountStore) -> None:
    later = datetime.now(UTC) + timedelta(seconds=60)
    assert store.cool("a", later, "long")
    assert not store.cool("a", later - timedelta(seconds=30), "short")
    state = store.state("a")
    assert state.state == "cooling"
    assert state.reason == "long"
    assert state.cooldown_until is not None
    assert abs((state.cooldown_until - later).total_seconds()) < 0.01


def test_expired_cooldown_reads_as_ok(store: AccountStore) -> None:
    store.cool("a", datetime.now(UTC) + timedelta(seconds=5), "rejected")
    state = store.state("a", now=time.time() + 10)
    assert state.state == "ok"
    assert state.cooldown_until is None
    assert state.reason is None


def test_warning_state_and_windows(store: AccountStore) -> None:
    resets = datetime.now(UTC) + timedelta(hours=1)
    store.record_window("a", "five_hour", WindowInfo(status="allowed_warning", utilization=0.91, resets_at=resets))
    store.set_warning("a", "five_hour")
    state = store.state("a")
    assert state.state == "warning"
    assert state.reason == "five_hour utilization 0.91"
    assert state.public()["utilization"] == {"five_hour": 0.91}
    # Once the warned window has reset, the warning no longer applies.
    assert store.state("a", now=resets.timestamp() + 1).state == "ok"
    store.clear_warning("a")
    assert store.state("a").state == "ok"


def test_signals_never_overwrite_disabled(store: AccountStore) -> None:
    store.disable("a", "authentication failed (401)")
    store.set_warning("a", "five_hour")
    store.clear_warning("a")
    store.cool("a", datetime.now(UTC) + timedelta(seconds=30), "rejected")
    state = store.state("a")
    assert state.state == "disabled"
    assert state.reason == "authentication failed (401)"
    store.enable("a")
    # Enabled again, but the rate limit seen meanwhile still holds.
    assert store.state("a").state == "cooling"


def test_unknown_account_is_refused(store: AccountStore) -> None:
    for call in (
        lambda: store.state("zz"),
        lambda: store.disable("zz", "x"),
        lambda: store.enable("zz"),
        lambda: store.clear_cooldown("zz"),
        lambda: run_call(store.acquire_call("zz", "j", 1)),
    ):
        with pytest.raises(UnknownAccount):
            call()


def test_unreadable_window_is_skipped(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    fake_redis.hset(KEYS.account("a"), mapping={"w:five_hour": "not json", "n:rejected": "x", "n:acquired": "3"})
    state = store.state("a")
    assert state.windows == {}
    assert state.counters == {"acquired": 3}


def test_states_in_pool_order_without_secrets(store: AccountStore) -> None:
    states = store.states()
    assert [s.name for s in states] == ["a", "b"]
    assert [s.max_concurrency for s in states] == [2, 1]
    assert "TOKEN" not in repr([s.public() for s in states])


def test_held_by(store: AccountStore) -> None:
    run_call(store.acquire_call("b", "j1", 10))
    assert run_call(store.held_by_call("j1")) == ["b"]
    assert run_call(store.held_by_call("j2")) == []


def test_a_slot_freed_before_the_waiter_joined_admits_it_at_once(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    _defer(fake_redis, "w1", ready=now + 15)
    run_call(store.acquire_call("b", "j1", 15, now=now))
    # Still full: the job waits in line; its ready time is only the fallback now.
    assert run_call(store.add_waiter_call(["b"], Waiter("w1", rank=now), now=now, fallback_s=300)) == []
    assert fake_redis.zscore(KEYS.deferred, "w1") == now + 300
    # A slot released with nobody in line is free: a job joining the line takes it at once.
    fake_redis.zrem(KEYS.account_waiters("b"), "w1")
    run_call(store.release_call("b", "j1"))
    assert run_call(store.add_waiter_call(["b"], Waiter("w1", rank=now), now=now + 1)) == ["w1"]
    assert fake_redis.zscore(KEYS.deferred, "w1") is None
    assert set(store.slot_holders("b", now=now + 1)) == {"w1"}
    # A cooling account is no reason to admit it.
    _defer(fake_redis, "w2")
    store.cool("a", datetime.now(UTC) + timedelta(seconds=50), "rejected")
    assert run_call(store.add_waiter_call(["a"], Waiter("w2", rank=now))) == []
    # Nor is a job that is no longer deferred.
    assert run_call(store.add_waiter_call(["a", "b"], Waiter("gone", rank=0.0))) == []
    assert store.waiters("a") == ["w2"]


def test_joining_the_line_moves_the_ready_time_out_to_the_fallback_never_earlier(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    run_call(store.acquire_call("b", "j1", 15, now=now))
    # Deferred until the slot's expiry: in line, a freed slot is handed to it; no re-send every lease TTL.
    _defer(fake_redis, "w1", ready=now + 15)
    assert run_call(store.add_waiter_call(["b"], Waiter("w1", rank=now), now=now, fallback_s=300)) == []
    assert fake_redis.zscore(KEYS.deferred, "w1") == now + 300
    # A later ready time (a cooldown ending in an hour) is kept.
    _defer(fake_redis, "w2", ready=now + 3600)
    assert run_call(store.add_waiter_call(["b"], Waiter("w2", rank=now + 1), now=now, fallback_s=300)) == []
    assert fake_redis.zscore(KEYS.deferred, "w2") == now + 3600
    # A job no longer deferred is neither put in line nor put back in the deferred set.
    fake_redis.hset(KEYS.job("w3"), "status", "queued")
    assert run_call(store.add_waiter_call(["b"], Waiter("w3", rank=now + 2), now=now, fallback_s=300)) == []
    assert fake_redis.zscore(KEYS.deferred, "w3") is None
    assert store.waiters("b") == ["w1", "w2"]


def test_one_job_in_several_lines_is_admitted_once(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    _defer(fake_redis, "w1")
    assert run_call(store.add_waiter_call(["a", "b"], Waiter("w1", rank=1.0))) == [
        "w1"
    ]  # both free: one slot, on the first account
    assert set(store.slot_holders("a")) == {"w1"}
    assert store.slot_holders("b") == {}
    assert run_call(store.admit_call("b")) == []  # its entry in b's line is stale now (queued): dropped
    assert store.waiters("b") == []
