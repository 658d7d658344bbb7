"""Window-aware admission on fakeredis (with Lua): ceilings, model-family windows and cooldowns, predictive holds,
the ramp after a reset, and the per-family waiting lines."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest

from claudeq.accounts import AccountStore, Waiter, model_family, window_family
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.keys import Keys
from claudeq.script_calls import run_call

KEYS = Keys("t:")


@pytest.fixture
def store(fake_redis: fakeredis.FakeRedis) -> AccountStore:
    pool = AccountPool(
        accounts=[
            AccountConfig(
                name="a",
                kind="oauth",
                token_env="TOKEN_A",
                max_concurrency=4,
                utilization_ceiling=0.9,
                ceilings={"five_hour": 0.8},
                ramp_starts_per_s=2.0,
            ),
            AccountConfig(name="b", kind="oauth", token_env="TOKEN_B", max_concurrency=2, ramp_starts_per_s=0),
        ]
    )
    return AccountStore(fake_redis, KEYS, pool)


def _defer(fake_redis: fakeredis.FakeRedis, *job_ids: str) -> None:
    for job_id in job_ids:
        fake_redis.hset(KEYS.job(job_id), "status", "deferred")
        fake_redis.zadd(KEYS.deferred, {job_id: time.time() + 60})


def test_families() -> None:
    assert [model_family(m) for m in (None, "opus", "claude-sonnet-4-5", "claude-haiku-4-5", "x")] == [
        "-",
        "opus",
        "sonnet",
        "haiku",
        "-",
    ]
    assert [window_family(w) for w in ("five_hour", "seven_day", "seven_day_opus", "seven_day_overage_included")] == [
        "-",
        "-",
        "opus",
        "-",
    ]


def test_a_window_at_its_ceiling_reserves_the_account_until_it_resets(store: AccountStore) -> None:
    now = time.time()
    reset = now + 100
    store.record_utilization("a", [("five_hour", 0.79, reset), ("seven_day", 0.01, now + 5000)])
    assert run_call(store.acquire_call("a", "j1", 10, now=now)) == 1
    store.record_utilization("a", [("five_hour", 0.8, reset)])  # five_hour's own ceiling: 0.8
    assert run_call(store.acquire_call("a", "j2", 10, now=now)) == -5
    state = store.state("a", now=now)
    assert state.state == "reserved"
    assert state.reason is not None and "five_hour utilization 0.80 at its ceiling 0.80" in state.reason
    assert [(r.window, r.family, r.predicted) for r in state.reservations] == [("five_hour", "-", False)]
    # The other account is untouched; the window's reset ends the reservation.
    assert run_call(store.acquire_call("b", "j2", 10, now=now)) == 1
    assert store.state("a", now=reset + 1).state == "ok"
    assert run_call(store.acquire_call("a", "j2", 10, now=reset + 5)) == 1
    # The account-wide ceiling (0.9) covers windows without one of their own.
    store.record_utilization("a", [("seven_day", 0.9, now + 5000)])
    assert run_call(store.acquire_call("a", "j3", 10, now=reset + 5)) == -5


def test_a_model_family_window_holds_back_only_that_family(store: AccountStore) -> None:
    now = time.time()
    store.record_utilization("b", [("seven_day", 0.2, now + 100)])
    store.record_utilization("b", [("seven_day_opus", 1.0, now + 100), ("seven_day", 0.3, now + 100)])
    assert run_call(store.acquire_call("b", "opus-job", 10, now=now, family="opus")) == -5
    assert run_call(store.acquire_call("b", "sonnet-job", 10, now=now, family="sonnet")) == 1
    assert run_call(store.acquire_call("b", "any-job", 10, now=now)) == 1
    state = store.state("b", now=now)
    assert state.state == "ok"  # not reserved as a whole
    assert [(r.window, r.family) for r in state.reservations] == [("seven_day_opus", "opus")]


def test_a_model_family_cooldown_holds_back_only_that_family(store: AccountStore) -> None:
    until = datetime.now(UTC) + timedelta(seconds=60)
    store.cool("b", until, "429 on seven_day_opus", family="opus")
    assert run_call(store.acquire_call("b", "o", 10, family="opus")) == -2
    assert run_call(store.acquire_call("b", "s", 10, family="sonnet")) == 1
    state = store.state("b")
    assert state.state == "ok" and set(state.family_cooldowns) == {"opus"}
    store.clear_cooldown("b")
    assert run_call(store.acquire_call("b", "o", 10, family="opus")) == 1


def test_predictive_admission_stops_before_the_runs_in_flight_would_pass_the_ceiling(store: AccountStore) -> None:
    now = time.time()
    reset = now + 100
    # Each request adds 0.25 (two readings of the same window).
    store.record_utilization("b", [("five_hour", 0.25, reset)])
    store.record_utilization("b", [("five_hour", 0.5, reset)])
    assert run_call(store.acquire_call("b", "j1", 10, now=now)) == 1  # 0.5 + 1 * 0.25 <= 1
    assert run_call(store.acquire_call("b", "j2", 10, now=now)) == 1  # 0.5 + 2 * 0.25 = 1: the window's last request
    store.redis.hset(KEYS.account("b"), "pu:five_hour", f"0.5 {reset} 0.25 1 - 2")
    assert store.state("b", now=now).reservations[0].predicted  # and one more would pass it
    run_call(store.release_call("b", "j1", now=now))
    store.record_utilization("b", [("five_hour", 0.75, reset)])  # j1's request
    assert run_call(store.acquire_call("b", "j3", 10, now=now)) == -5  # 0.75 + (j2 + 1) * 0.25 > 1
    run_call(store.release_call("b", "j2", now=now))
    store.record_utilization("b", [("five_hour", 1.0, reset)])
    assert run_call(store.acquire_call("b", "j3", 10, now=now)) == -5
    assert not store.state("b", now=now).reservations[0].predicted  # at the ceiling now
    # An out-of-order reading of the same window never lowers it.
    store.record_utilization("b", [("five_hour", 0.25, reset)])
    assert store.state("b", now=now).reservations[0].utilization == 1.0
    # A new window starts from its own reading and keeps what one request adds.
    assert run_call(store.acquire_call("b", "j3", 10, now=reset + 1)) == 1
    store.record_utilization("b", [("five_hour", 0.5, reset + 100)])
    assert run_call(store.acquire_call("b", "j4", 10, now=reset + 1)) == 1  # 0.5 + 2 * 0.25 = 1
    run_call(store.release_call("b", "j4", now=reset + 1))
    store.record_utilization("b", [("five_hour", 0.75, reset + 100)])
    assert run_call(store.acquire_call("b", "j4", 10, now=reset + 1)) == -5  # 0.75 + (j3 + 1) * 0.25 > 1


def test_without_prediction_only_the_ceiling_counts(fake_redis: fakeredis.FakeRedis) -> None:
    pool = AccountPool(accounts=[AccountConfig(name="b", kind="oauth", token_env="T", max_concurrency=4)])
    plain = AccountStore(fake_redis, KEYS, pool, predictive=False)
    now = time.time()
    plain.record_utilization("b", [("five_hour", 0.25, now + 100)])
    plain.record_utilization("b", [("five_hour", 0.75, now + 100)])
    assert [run_call(plain.acquire_call("b", f"j{i}", 10, now=now)) for i in range(2)] == [1, 1]


def test_starts_are_ramped_after_a_cooldown_ends(store: AccountStore, fake_redis: fakeredis.FakeRedis) -> None:
    now = time.time()
    store.cool("a", datetime.fromtimestamp(now + 10, UTC), "429")
    assert run_call(store.acquire_call("a", "j0", 10, now=now + 5)) == -2
    after = float(fake_redis.hget(KEYS.account("a"), "cooldown_until") or 0) + 0.001
    assert run_call(store.acquire_call("a", "j1", 10, now=after)) == 1
    assert (
        run_call(store.acquire_call("a", "j2", 10, now=after + 0.1)) == -6
    )  # 2 per second: the next start is due at +0.5
    assert run_call(store.acquire_call("a", "j2", 10, now=after + 0.5)) == 1
    # However late the next start comes, starts are paced until as many runs as the account has slots (4) started.
    assert run_call(store.acquire_call("a", "j3", 10, now=after + 10)) == 1
    assert run_call(store.acquire_call("a", "j4", 10, now=after + 10.1)) == -6
    assert run_call(store.acquire_call("a", "j4", 10, now=after + 10.5)) == 1
    run_call(store.release_call("a", "j1", now=after + 10.5))
    assert run_call(store.acquire_call("a", "j5", 10, now=after + 10.6)) == 1  # four started: the ramp is over
    # An account without a ramp starts everything at once.
    store.cool("b", datetime.fromtimestamp(now + 10, UTC), "429")
    assert [run_call(store.acquire_call("b", f"k{i}", 10, now=after)) for i in range(2)] == [1, 1]


def test_the_ramp_waits_its_jitter(fake_redis: fakeredis.FakeRedis) -> None:
    pool = AccountPool(accounts=[AccountConfig(name="b", kind="oauth", token_env="T", max_concurrency=2)])
    jittered = AccountStore(fake_redis, KEYS, pool, jitter_s=0.5)
    now = time.time()
    jittered.cool("b", datetime.fromtimestamp(now + 10, UTC), "429")
    jitter = float(fake_redis.hget(KEYS.account("b"), "ramp_j") or 0)
    ended = float(fake_redis.hget(KEYS.account("b"), "cooldown_until") or 0)
    assert 0 <= jitter <= 0.5
    if jitter > 0.01:
        assert run_call(jittered.acquire_call("b", "j1", 10, now=ended + 0.001)) == -6
    assert run_call(jittered.acquire_call("b", "j1", 10, now=ended + jitter + 0.001)) == 1


def test_waiters_of_a_held_back_family_stay_in_line_while_others_are_admitted(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    run_call(store.acquire_call("b", "j1", 10, now=now))
    run_call(store.acquire_call("b", "j2", 10, now=now))
    _defer(fake_redis, "opus-1", "sonnet-1")
    assert run_call(store.add_waiter_call(["b"], Waiter("opus-1", rank=1.0, family="opus"), now=now)) == []
    assert run_call(store.add_waiter_call(["b"], Waiter("sonnet-1", rank=2.0, family="sonnet"), now=now)) == []
    assert store.waiters("b") == ["opus-1", "sonnet-1"]
    store.record_utilization("b", [("seven_day_opus", 1.0, now + 100)])
    # The released slot goes to the sonnet job although the opus job is ranked first: opus is reserved here.
    assert run_call(store.release_call("b", "j1", now=now)) == ["sonnet-1"]
    assert store.waiters("b") == ["opus-1"]
    # At the reset the opus job's turn comes.
    assert run_call(store.release_call("b", "j2", now=now + 101)) == ["opus-1"]


def test_a_handed_slot_is_given_back_when_its_family_closed_meanwhile(
    store: AccountStore, fake_redis: fakeredis.FakeRedis
) -> None:
    now = time.time()
    _defer(fake_redis, "opus-1")
    assert run_call(store.add_waiter_call(["b"], Waiter("opus-1", rank=1.0, family="opus"), now=now)) == ["opus-1"]
    store.record_utilization("b", [("seven_day_opus", 1.0, now + 100)])
    assert run_call(store.acquire_call("b", "opus-1", 10, now=now, family="opus")) == -5
    assert store.slot_holders("b", now=now) == {}


def test_before_any_rise_each_reading_of_the_window_counts_as_one_of_ours(store: AccountStore) -> None:
    now = time.time()
    store.record_utilization("a", [("five_hour", 0.25, now + 100)])  # one reading: one request took 0.25
    assert (
        run_call(store.acquire_call("a", "j1", 10, now=now)) == 1
    )  # nothing in flight: a run below the ceiling may start
    assert (
        run_call(store.acquire_call("a", "j2", 10, now=now)) == 1
    )  # 0.25 + 2 * 0.25 = 0.75 <= five_hour's ceiling 0.8
    assert run_call(store.acquire_call("a", "j3", 10, now=now)) == -5  # 0.25 + 3 * 0.25 > 0.8
    # A human's use before ours makes the estimate too high, but never holds an idle account: with nothing in flight
    # a run below the ceiling starts, and its reading gives a real rise.
    run_call(store.release_call("a", "j1", now=now))
    run_call(store.release_call("a", "j2", now=now))
    store.record_utilization("b", [("five_hour", 0.6, now + 100)])
    assert run_call(store.acquire_call("b", "k1", 10, now=now)) == 1
    assert run_call(store.acquire_call("b", "k2", 10, now=now)) == -5
    run_call(store.release_call("b", "k1", now=now))
    store.record_utilization("b", [("five_hour", 0.61, now + 100)])
    assert run_call(store.acquire_call("b", "k1", 10, now=now)) == 1
    assert run_call(store.acquire_call("b", "k2", 10, now=now)) == 1  # 0.61 + 2 * 0.01
