"""AccountManager on fakeredis: leases, routing around cooling/disabled accounts, signals, waiters."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import AccountState, JobSpec
from claudeq.script_calls import PipeCall, run_call
from claudeq.worker.accounts.manager import AccountManager, NoAccount, SlotLease
from claudeq.worker.run.outcome import RateLimitSignal
from tests.support.aio import run

SPEC = JobSpec(prompt="hello")


def pool(*accounts: tuple[str, int]) -> AccountPool:
    return AccountPool(
        accounts=[
            AccountConfig(name=name, kind="oauth", token_env=f"TOKEN_{name}", max_concurrency=n) for name, n in accounts
        ]
    )


@pytest.fixture
def manager(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> AccountManager:
    return AccountManager(fake_settings, fake_redis, Keys(fake_settings.key_prefix), pool(("a", 1), ("b", 2)))


def lease(result: SlotLease | NoAccount) -> SlotLease:
    assert isinstance(result, SlotLease), result
    return result


def test_spreads_jobs_and_defers_when_full(manager: AccountManager) -> None:
    leases = [lease(run(manager.acquire(f"j{i}", SPEC))) for i in range(3)]
    assert sorted(x.account.name for x in leases) == ["a", "b", "b"]
    full = run(manager.acquire("j9", SPEC))
    assert isinstance(full, NoAccount)
    assert not full.permanent
    assert sorted(full.accounts) == ["a", "b"]
    assert full.ready_at > datetime.now(UTC)
    assert full.ready_at <= datetime.now(UTC) + timedelta(seconds=manager.settings.lease_ttl_s)


def test_repeated_acquire_returns_the_same_slot(manager: AccountManager) -> None:
    first = lease(run(manager.acquire("j1", SPEC)))
    again = lease(run(manager.acquire("j1", SPEC)))
    assert again.account.name == first.account.name
    assert sum(s.slots_in_use for s in manager.signals.states()) == 1


def test_rejected_with_reset_cools_until_then_and_routes_elsewhere(manager: AccountManager) -> None:
    resets = datetime.now(UTC) + timedelta(seconds=40)
    manager.signals.observe("b", RateLimitSignal("rejected", resets, "five_hour"))
    state = manager.signals.state("b")
    assert state.state == "cooling"
    assert state.cooldown_until is not None
    assert abs((state.cooldown_until - resets).total_seconds()) < 0.01
    assert "five_hour" in (state.reason or "")
    assert lease(run(manager.acquire("j1", SPEC))).account.name == "a"
    waiting = run(manager.acquire("j2", SPEC))
    assert isinstance(waiting, NoAccount)
    # a (full) frees at its slot expiry at the latest, before b's cooldown ends.
    assert waiting.accounts == ["a", "b"]


def test_rejected_seen_by_a_second_manager_at_once(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis, manager: AccountManager
) -> None:
    other = AccountManager(fake_settings, fake_redis, Keys(fake_settings.key_prefix), manager.pool)
    manager.signals.observe("a", RateLimitSignal("rejected", datetime.now(UTC) + timedelta(seconds=40), "five_hour"))
    assert lease(run(other.acquire("j1", SPEC.model_copy(update={"account": None})))).account.name == "b"
    pinned = run(other.acquire("j2", JobSpec(prompt="x", account="a")))
    assert isinstance(pinned, NoAccount)
    assert not pinned.permanent
    assert pinned.accounts == ["a"]


@pytest.fixture
def direct_manager(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> AccountManager:
    """Runs without the pass-through: a RateLimitEvent is all the worker learns about a rejection."""
    cfg = fake_settings.model_copy(update={"passthrough": False})
    return AccountManager(cfg, fake_redis, Keys(cfg.key_prefix), pool(("a", 1), ("b", 2)))


def test_rejected_without_reset_cools_for_the_default(direct_manager: AccountManager) -> None:
    manager = direct_manager
    before = datetime.now(UTC)
    manager.signals.observe("a", RateLimitSignal("rejected", None, None))
    until = manager.signals.state("a").cooldown_until
    assert until is not None
    expected = before + timedelta(seconds=manager.settings.rate_limit_cooldown_s)
    assert abs((until - expected).total_seconds()) < 2


def test_rejected_event_without_reset_leaves_the_cooldown_to_the_pass_through(manager: AccountManager) -> None:
    # The pass-through saw that 429's headers and cooled from them (or backed off): the event adds nothing.
    manager.signals.observe("a", RateLimitSignal("rejected", None, None))
    assert manager.signals.state("a").cooldown_until is None
    assert manager.signals.state("a").counters.get("rejected") is None


def test_rejected_with_a_past_reset_uses_the_default(direct_manager: AccountManager) -> None:
    manager = direct_manager
    manager.signals.observe("a", RateLimitSignal("rejected", datetime.now(UTC) - timedelta(seconds=5), "five_hour"))
    until = manager.signals.state("a").cooldown_until
    assert until is not None
    assert until > datetime.now(UTC) + timedelta(seconds=manager.settings.rate_limit_cooldown_s - 2)


def test_warning_is_recorded_and_chosen_last_then_cleared(manager: AccountManager) -> None:
    resets = datetime.now(UTC) + timedelta(hours=2)
    manager.signals.observe("b", RateLimitSignal("allowed_warning", resets, "five_hour", 0.91))
    state = manager.signals.state("b")
    assert state.state == "warning"
    assert state.windows["five_hour"].utilization == 0.91
    assert lease(run(manager.acquire("j1", SPEC))).account.name == "a"
    manager.signals.observe("b", RateLimitSignal("allowed", resets, "five_hour", 0.2))
    state = manager.signals.state("b")
    assert state.state == "ok"
    assert state.windows["five_hour"].utilization == 0.2


def test_cool_for_an_api_key_429(manager: AccountManager) -> None:
    manager.signals.cool("a", manager.signals.default_cooldown_end(), "429 on api_key account")
    assert manager.signals.state("a").state == "cooling"
    assert manager.signals.state("a").reason == "429 on api_key account"


def test_disable_logs_and_blocks_until_enabled(manager: AccountManager, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="claudeq.accounts"):
        manager.signals.disable("a", "authentication failed (401)")
    assert "account a disabled: authentication failed (401)" in caplog.text
    assert manager.signals.state("a").state == "disabled"
    pinned = run(manager.acquire("j1", JobSpec(prompt="x", account="a")))
    assert isinstance(pinned, NoAccount)
    assert pinned.permanent
    assert "401" in pinned.reason
    manager.signals.enable("a")
    assert lease(run(manager.acquire("j1", JobSpec(prompt="x", account="a")))).account.name == "a"


def test_clear_cooldown(manager: AccountManager) -> None:
    manager.signals.observe("a", RateLimitSignal("rejected", datetime.now(UTC) + timedelta(seconds=60), "five_hour"))
    manager.signals.clear_cooldown("a")
    assert manager.signals.state("a").state == "ok"


def test_permanent_when_pinned_to_an_unknown_account(manager: AccountManager) -> None:
    result = run(manager.acquire("j1", JobSpec(prompt="x", account="nope")))
    assert isinstance(result, NoAccount)
    assert result.permanent


def test_exclude_routes_to_another_account(manager: AccountManager) -> None:
    assert lease(run(manager.acquire("j1", SPEC, exclude=frozenset({"a"})))).account.name == "b"


def test_release_hands_the_slot_to_a_waiter(manager: AccountManager, fake_redis: fakeredis.FakeRedis) -> None:
    held = lease(run(manager.acquire("j1", JobSpec(prompt="x", account="a"), rank=5.0)))
    waiting = run(manager.acquire("j2", JobSpec(prompt="x", account="a"), rank=9.0))
    assert isinstance(waiting, NoAccount)
    fake_redis.hset(manager.store.keys.job("j2"), "status", "deferred")
    assert run(manager.add_waiter([*waiting.accounts, "unknown"], "j2", 9.0)) == []
    assert run(manager.release(held)) == ["j2"]
    # A job that arrives now finds no free slot: the one released is j2's.
    late = run(manager.acquire("j3", JobSpec(prompt="x", account="a"), rank=1.0))
    assert isinstance(late, NoAccount)
    assert lease(run(manager.acquire("j2", JobSpec(prompt="x", account="a"), rank=9.0))).account.name == "a"


def _in_line(client: fakeredis.FakeRedis, manager: AccountManager, account: str, members: dict[str, float]) -> None:
    """Put jobs in an account's line as ADD_WAITER does (without its admit): the entries and the account's `wq`."""
    client.zadd(manager.store.keys.account_waiters(account), members)
    client.hset(manager.store.keys.account(account), "wq", "1")


def test_a_new_job_waits_in_line_behind_better_ranked_waiters(
    manager: AccountManager, fake_redis: fakeredis.FakeRedis
) -> None:
    fake_redis.hset(manager.store.keys.job("urgent"), "status", "deferred")
    _in_line(fake_redis, manager, "a", {"urgent": 1.0})
    pinned = JobSpec(prompt="x", account="a")
    waiting = run(manager.acquire("bulk", pinned, rank=9e10))
    assert isinstance(waiting, NoAccount)
    assert "waiting in line" in waiting.reason and waiting.accounts == ["a"]
    # Its turn comes through the line: the ready time is only the fallback.
    assert waiting.ready_at > datetime.now(UTC) + timedelta(seconds=manager.settings.lease_ttl_s / 2)
    assert run(manager.admit()) == ["urgent"]


def test_a_job_in_line_waits_in_the_line_of_every_account_that_may_run_it(
    manager: AccountManager, fake_redis: fakeredis.FakeRedis
) -> None:
    # `a`'s free slot is spoken for by a better-ranked waiter; `b` is full. The job waits in both lines, so the slot
    # `b` frees next is handed to it (joining `a`'s line alone, it would sit there until its fallback).
    fake_redis.hset(manager.store.keys.job("urgent"), "status", "deferred")
    _in_line(fake_redis, manager, "a", {"urgent": 1.0})
    held = [lease(run(manager.acquire(f"b{i}", JobSpec(prompt="x", account="b")))) for i in range(2)]
    waiting = run(manager.acquire("bulk", SPEC, rank=9e10))
    assert isinstance(waiting, NoAccount)
    assert "waiting in line" in waiting.reason and waiting.accounts == ["a", "b"]
    fake_redis.hset(manager.store.keys.job("bulk"), "status", "deferred")
    fake_redis.zadd(manager.store.keys.deferred, {"bulk": waiting.ready_at.timestamp()})
    assert run(manager.add_waiter(waiting.accounts, "bulk", 9e10)) == ["urgent"]  # a's free slot: the better waiter's
    fallback = fake_redis.zscore(manager.store.keys.deferred, "bulk")
    assert fallback is not None and fallback > time.time() + manager.settings.waiter_fallback_s - 5
    assert run(manager.release(held[0])) == ["bulk"]


def test_refresh_keeps_the_slot(manager: AccountManager) -> None:
    held = lease(run(manager.acquire("j1", JobSpec(prompt="x", account="a"))))
    manager.refresh(held, 120)
    expiry = manager.store.slot_holders("a")["j1"]
    assert expiry > time.time() + 100


def test_racing_threads_never_exceed_max_concurrency(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> None:
    accounts = pool(("a", 2), ("b", 3))
    managers = [AccountManager(fake_settings, fake_redis, Keys(fake_settings.key_prefix), accounts) for _ in range(4)]
    got: list[SlotLease] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        for n in range(10):
            result = run(managers[index].acquire(f"t{index}-{n}", SPEC))
            if isinstance(result, SlotLease):
                with lock:
                    got.append(result)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_account = {name: sum(1 for x in got if x.account.name == name) for name in ("a", "b")}
    assert by_account == {"a": 2, "b": 3}
    assert {s.name: s.slots_in_use for s in managers[0].signals.states()} == {"a": 2, "b": 3}


def test_an_acquire_reuses_a_fresh_read_of_the_accounts_but_never_says_no_from_it(
    manager: AccountManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[float] = []
    snapshot = manager.store.snapshot_call

    def counted(now: float) -> PipeCall[list[tuple[AccountState, datetime | None]]]:
        reads.append(time.time())
        return snapshot(now)

    monkeypatch.setattr(manager.store, "snapshot_call", counted)
    first, second = lease(run(manager.acquire("j1", SPEC))), lease(run(manager.acquire("j2", SPEC)))
    assert len(reads) == 1  # the second acquire chose from the first one's read
    assert {first.account.name, second.account.name} <= {"a", "b"}
    # Cooled meanwhile: the reused read still shows `b` open; the script refuses it and a fresh read routes away.
    manager.signals.cool("b", datetime.now(UTC) + timedelta(seconds=60), "test")
    reads.clear()
    taken = run(manager.acquire("j3", SPEC))
    full = run(manager.acquire("j4", SPEC))
    assert isinstance(taken, SlotLease) or "cooling" in taken.reason
    # Nothing decided from a reused read: the answer is the one a fresh read gives (every slot taken or cooling).
    assert isinstance(full, NoAccount) and not full.permanent
    assert len(reads) >= 2


def test_a_waiter_handed_a_slot_finds_it_where_its_record_says(
    manager: AccountManager, fake_redis: fakeredis.FakeRedis
) -> None:
    # `b` has room, but the slot the waiting line handed the job is on `a`: its record names it (`slot`), and an
    # acquire told to look only there takes that slot back, never a second one.
    held = lease(run(manager.acquire("j1", JobSpec(prompt="x", account="a"), rank=5.0)))
    fake_redis.hset(manager.store.keys.job("j2"), "status", "deferred")
    assert run(manager.add_waiter(["a"], "j2", 9.0)) == []
    assert run(manager.release(held)) == ["j2"]
    hint = fake_redis.hget(manager.store.keys.job("j2"), "slot")
    assert hint is not None and hint.decode() == manager.store.keys.account_slots("a")
    again = lease(run(manager.acquire("j2", SPEC, rank=9.0, holds=frozenset({hint.decode()}))))
    assert again.account.name == "a"
    assert run_call(manager.store.held_by_call("j2")) == ["a"]
    # A job that may hold no slot anywhere looks at no account's slots before choosing.
    assert run_call(manager.store.held_by_call("j2", among=frozenset())) == []
    assert run_call(manager.store.held_by_call("j2", among={"b"})) == []


def test_the_paced_starts_after_a_reset_go_by_rank(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> None:
    """A priority-0 job that arrives while starts are ramping up after a reset gets the next start before a
    priority-9 job already waiting: both wait in the line, and the paced starts are handed out from it by rank."""
    from claudeq.worker.accounts.waiting_line import PRIORITY_SPAN

    settings = fake_settings.model_copy(update={"ramp_jitter_s": 0.0})
    account = AccountConfig(name="a", kind="oauth", token_env="TOKEN_a", max_concurrency=4, ramp_starts_per_s=2.0)
    manager = AccountManager(settings, fake_redis, Keys(settings.key_prefix), AccountPool(accounts=[account]))
    keys = Keys(settings.key_prefix)
    manager.store.cool("a", datetime.now(UTC) + timedelta(seconds=0.05), "429")
    time.sleep(0.1)  # the cooldown ended: starts are paced, 2 per second

    def arrive(job_id: str, priority: int) -> None:
        """What the delivery handler does with the answer: run, wait in place (a cooldown about to end), or wait
        deferred in the line of the accounts it names."""
        rank = priority * PRIORITY_SPAN + time.time()
        got = run(manager.acquire(job_id, JobSpec(prompt="hi", priority=priority), rank=rank))
        if isinstance(got, SlotLease):
            return
        if got.cooldown and (got.ready_at - datetime.now(UTC)).total_seconds() <= settings.retry_in_place_max_s:
            return  # waiting in place: in no line
        fake_redis.hset(keys.job(job_id), "status", "deferred")
        run(manager.add_waiter(got.accounts, job_id, rank))

    arrive("first", 9)  # takes the first start
    assert run_call(manager.store.held_by_call("first")) == ["a"]
    arrive("bulk", 9)
    arrive("urgent", 0)
    time.sleep(0.55)  # the next start is due
    assert run(manager.admit()) == ["urgent"]


def test_a_paced_start_goes_to_the_best_waiter_not_to_a_worse_ranked_newcomer(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    """While starts ramp up after a reset only one start is due at a time: a job arriving when it is due, ranked
    behind a job waiting in line, waits too (the free slots are many, the start is one)."""
    from claudeq.worker.accounts.waiting_line import PRIORITY_SPAN

    settings = fake_settings.model_copy(update={"ramp_jitter_s": 0.0})
    account = AccountConfig(name="a", kind="oauth", token_env="TOKEN_a", max_concurrency=4, ramp_starts_per_s=2.0)
    manager = AccountManager(settings, fake_redis, Keys(settings.key_prefix), AccountPool(accounts=[account]))
    keys = Keys(settings.key_prefix)
    manager.store.cool("a", datetime.now(UTC) + timedelta(seconds=0.05), "429")
    time.sleep(0.1)
    assert isinstance(run(manager.acquire("first", SPEC, rank=9 * PRIORITY_SPAN + time.time())), SlotLease)
    urgent_rank = time.time()
    waiting = run(manager.acquire("urgent", JobSpec(prompt="hi", priority=0), rank=urgent_rank))
    assert isinstance(waiting, NoAccount)
    fake_redis.hset(keys.job("urgent"), "status", "deferred")  # what the handler does: defer, join the line
    assert run(manager.add_waiter(waiting.accounts, "urgent", urgent_rank)) == []
    time.sleep(0.55)  # the next start is due
    late = run(manager.acquire("late", JobSpec(prompt="hi", priority=9), rank=9 * PRIORITY_SPAN + time.time()))
    assert isinstance(late, NoAccount), late
    assert run(manager.admit()) == ["urgent"]


def test_token_counts_of_attempts_ending_together_add_up(manager: AccountManager) -> None:
    """Attempts that end in the same turn of the loop share one write of their token counts: each is counted."""
    from claudeq.models import Usage

    async def end_together() -> None:
        usage = Usage(input_tokens=100, cache_read_tokens=1000, cache_creation_tokens=10)
        await asyncio.gather(
            *(manager.count_tokens(name, usage) for name in ("a", "a", "b")),
            manager.count_tokens("a", Usage(input_tokens=1)),
        )

    run(end_together())
    assert manager.store.state("a").counters == {
        "input_tokens": 201,
        "cache_read_tokens": 2000,
        "cache_write_tokens": 20,
    }
    assert manager.store.state("b").counters == {
        "input_tokens": 100,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 10,
    }
    run(manager.count_tokens("b", Usage(input_tokens=5)))  # a later end: a write of its own
    assert manager.store.state("b").counters["input_tokens"] == 105
