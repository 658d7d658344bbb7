"""AccountStore on fakeredis (with Lua): the slot semaphore, waiters, cooldowns, state reads and operator writes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest

from claudeq.account_state import AccountStore
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.errors import UnknownAccount
from claudeq.keys import Keys
from claudeq.models import WindowInfo

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
    assert store.try_acquire("a", "j1", 10) == 1
    assert store.try_acquire("a", "j2", 10) == 1
    assert store.try_acquire("a", "j3", 10) == 0
    assert set(store.slot_holders("a")) == {"j1", "j2"}
    assert store.state("a").slots_in_use == 2


def test_acquire_is_idempotent_per_job(store: AccountStore) -> None:
    assert store.try_acquire("b", "j1", 10) == 1
    assert store.try_acquire("b", "j1", 10) == 1
    assert store.slot_holders("b").keys() == {"j1"}
    assert store.state("b").counters["acquired"] == 1


def test_expired_slots_free_themselves(store: AccountStore) -> None:
    now = time.time()
    assert store.try_acquire("b", "dead", 5, now=now) == 1
    assert store.try_acquire("b", "j2", 5, now=now + 1) == 0
    assert store.state("b", now=now + 6).slots_in_use == 0
    assert store.try_acquire("b", "j2", 5, now=now + 6) == 1
    assert store.slot_holders("b", now=now + 6).keys() == {"j2"}


def test_refresh_extends_only_a_held_slot(store: AccountStore) -> None:
    now = time.time()
    store.try_acquire("b", "j1", 5, now=now)
    assert store.refresh("b", "j1", 60, now=now)
    assert store.try_acquire("b", "j2", 5, now=now + 30) == 0  # j1's slot was extended past +30
    assert not store.refresh("b", "nobody", 60)
    assert "nobody" not in store.slot_holders("b")


def test_acquire_refuses_a_cooling_or_disabled_account(store: AccountStore) -> None:
    store.cool("a", datetime.now(UTC) + timedelta(seconds=30), "rate limited")
    assert store.try_acquire("a", "j1", 10) == -2
    store.clear_cooldown("a")
    store.disable("a", "401")
    assert store.try_acquire("a", "j1", 10) == -1
    store.enable("a")
    assert store.try_acquire("a", "j1", 10) == 1


def test_release_promotes_the_oldest_deferred_waiter(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    for job_id, status in [("w1", "queued"), ("w2", "deferred"), ("w3", "deferred")]:
        fake_redis.hset(KEYS.job(job_id), "status", status)
    now = time.time()
    store.add_waiter(["b"], "w1", now=now)
    store.add_waiter(["b"], "w2", now=now + 1)
    store.add_waiter(["b"], "w3", now=now + 2)
    store.add_waiter(["b"], "w2", now=now + 3)  # already waiting: keeps its place
    store.try_acquire("b", "j1", 10)
    # w1 is no longer deferred: skipped and dropped; w2 is the oldest deferred one.
    assert store.release("b", "j1") == ["w2"]
    assert store.waiters("b") == ["w3"]
    assert store.slot_holders("b") == {}
    assert store.release("b", "j1") == ["w3"]
    assert store.release("b", "j1") == []


def test_release_on_a_cooling_account_promotes_nobody(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    fake_redis.hset(KEYS.job("w1"), "status", "deferred")
    store.add_waiter(["a"], "w1")
    store.try_acquire("a", "j1", 10)
    store.cool("a", datetime.now(UTC) + timedelta(seconds=30), "rejected")
    assert store.release("a", "j1") == []
    assert store.waiters("a") == ["w1"]
    assert store.slot_holders("a") == {}


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
        lambda: store.try_acquire("zz", "j", 1),
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
    store.try_acquire("b", "j1", 10)
    assert store.held_by("j1") == ["b"]
    assert store.held_by("j2") == []


def test_a_slot_freed_before_the_waiter_registered_makes_the_job_due_now(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    fake_redis.zadd(KEYS.deferred, {"w1": now + 15})
    store.try_acquire("b", "j1", 15, now=now)
    # Still full: the job keeps its ready time (the slot's expiry) and waits for a release.
    assert not store.add_waiter(["b"], "w1", now=now)
    assert fake_redis.zscore(KEYS.deferred, "w1") == now + 15
    # The slot was released before the waiter registered (that release promoted nobody): due at once.
    store.release("b", "j1")
    assert store.add_waiter(["b"], "w1", now=now + 1)
    assert fake_redis.zscore(KEYS.deferred, "w1") == pytest.approx(now + 1)
    # A cooling account is no reason to wake it.
    fake_redis.zadd(KEYS.deferred, {"w2": now + 50})
    store.cool("a", datetime.now(UTC) + timedelta(seconds=50), "rejected")
    assert not store.add_waiter(["a"], "w2")
    # Nor is a job that is no longer deferred.
    assert not store.add_waiter(["b"], "gone")
    assert fake_redis.zscore(KEYS.deferred, "gone") is None
