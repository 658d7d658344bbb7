"""Background loops on fakeredis: promoter, reconciler (lost workers, lost messages), worker heartbeat."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.models import Attempt, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.background.loops import Loops, lost_attempts, worker_ttl_s
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import fake_engine


@pytest.fixture
def settings(unique: str) -> Settings:
    return make_settings("redis://127.0.0.1:1/0", unique, heartbeat_s=1, lease_ttl_s=1, unclaimed_resend_s=5)


@pytest.fixture
def store(settings: Settings) -> WorkerJobStore:
    return make_worker_store(settings, fakeredis.FakeRedis())


@pytest.fixture
def sent() -> list[str]:
    return []


@pytest.fixture
def loops(settings: Settings, store: WorkerJobStore, sent: list[str]) -> Iterator[Loops]:
    engine = fake_engine(settings, store, sent)
    engine.start()
    yield Loops(engine)
    engine.stop()


def submit(store: WorkerJobStore) -> str:
    record = JobRecord(id=f"j{time.monotonic_ns()}", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow())
    return run_call(store.create_call(record))[0]


def on_loop(loops: Loops, coro: Any) -> Any:
    return loops.engine.call(coro).result(5)


def test_promoter_sends_due_deferred_jobs_once(loops: Loops, store: WorkerJobStore, sent: list[str]) -> None:
    due, later = submit(store), submit(store)
    for job, ready in ((due, utcnow() - timedelta(seconds=1)), (later, utcnow() + timedelta(hours=1))):
        claim = run(store.send(store.claim_call(job, "w", 5)))
        assert run(store.send(store.write_call(JobWrite(job, claim.fence, "deferred", fields={"ready_at": ready}))))
    assert on_loop(loops, loops.promote_once()) == 1
    assert on_loop(loops, loops.promote_once()) == 0  # the ZREM claim makes a second pass a no-op
    assert sent == [due]
    assert run_call(store.status_call(due)) == "queued" and run_call(store.status_call(later)) == "deferred"


def test_reconciler_recovers_a_dead_workers_job_with_worker_lost(
    loops: Loops, store: WorkerJobStore, sent: list[str]
) -> None:
    job = submit(store)
    claim = run(store.send(store.claim_call(job, "dead", 5)))
    attempt = Attempt(number=1, account="a", worker="dead", started_at=utcnow())
    assert run(store.send(store.write_call(JobWrite(job, claim.fence, fields={"attempts": [attempt]}))))
    assert on_loop(loops, loops.recover_once()) == []  # lease still alive
    store.redis.zadd(store.keys.running, {job: 0})
    assert on_loop(loops, loops.recover_once()) == [job]
    record = run_call(store.get_call(job))
    assert record.status == "queued"
    assert [(a.number, a.outcome) for a in record.attempts] == [(1, "worker_lost")]
    assert sent == [job]
    assert on_loop(loops, loops.recover_once()) == []  # recovered exactly once


def test_one_reconciler_pass_per_interval_across_the_fleet(
    settings: Settings, loops: Loops, store: WorkerJobStore, sent: list[str]
) -> None:
    other = fake_engine(settings, store, sent, worker_id="w-other")
    other.start()
    try:
        second = Loops(other)
        job = submit(store)
        run(store.send(store.claim_call(job, "dead", 5)))
        store.redis.zadd(store.keys.running, {job: 0})
        assert on_loop(loops, loops.reconcile_once())  # this worker's turn: it recovers the dead worker's job
        assert run_call(store.status_call(job)) == "queued" and sent == [job]
        assert not on_loop(second, second.reconcile_once())  # within the interval: nobody else reads every lease
        store.redis.pexpire(store.keys.reconciler_turn, 1)  # the interval is over
        time.sleep(0.01)
        assert on_loop(second, second.reconcile_once())
        assert sent == [job]  # recovered once
    finally:
        other.stop()


def test_lost_attempt_is_appended_when_none_was_open() -> None:
    record = JobRecord(
        id="x",
        spec=JobSpec(prompt="p"),
        status="running",
        worker="w9",
        created_at=utcnow(),
        attempts=[Attempt(number=1, outcome="transient_error", started_at=utcnow())],
    )
    attempts = lost_attempts(record, "gone")
    assert [(a.number, a.outcome, a.worker) for a in attempts] == [
        (1, "transient_error", None),
        (2, "worker_lost", "w9"),
    ]


def test_reconciler_resends_queued_jobs_nobody_claimed(loops: Loops, store: WorkerJobStore, sent: list[str]) -> None:
    job, fresh = submit(store), submit(store)
    store.redis.zadd(store.keys.queued, {job: time.time() - 60})
    assert on_loop(loops, loops.resend_once()) == [job]
    assert on_loop(loops, loops.resend_once()) == []  # its send time moved forward
    assert sent == [job] and fresh not in sent


def test_worker_heartbeat_hash_and_zset(loops: Loops, store: WorkerJobStore, settings: Settings) -> None:
    on_loop(loops, loops.beat_once())
    key = store.keys.worker("w-test")
    data = store.redis.hgetall(key)
    assert data[b"pid"] and data[b"host"] and data[b"runs"] == b"0" and data[b"started_at"]
    assert 0 < store.redis.ttl(key) <= worker_ttl_s(settings.heartbeat_s)
    assert store.redis.zscore(store.keys.workers, "w-test") is not None
    loops.forget()
    assert not store.redis.exists(key) and store.redis.zscore(store.keys.workers, "w-test") is None


def test_reconciler_does_not_resend_a_job_whose_message_waits_behind_a_backlog(
    loops: Loops, store: WorkerJobStore, sent: list[str], settings: Settings
) -> None:
    from claudeq.broker import run_message

    waiting, lost = submit(store), submit(store)
    now = time.time()
    store.redis.zadd(store.keys.queued, {waiting: now - 60, lost: now - 90})
    # The queue's oldest message is `waiting`'s, sent after `lost`'s: the list is FIFO, so `lost`'s has left it.
    store.redis.lpush(settings.queue, run_message(waiting, settings.queue, 0, now - 60))
    assert on_loop(loops, loops.resend_once()) == [lost]  # only the job whose message is gone
    assert sent == [lost]
    assert run(store.stale_queued(settings.unclaimed_resend_s)) == []  # the waiting one is looked at again later


def test_slots_in_use_are_sampled_into_the_accounts_history_once_a_minute(
    store: WorkerJobStore, settings: Settings, sent: list[str], tmp_path: Path
) -> None:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text('[[accounts]]\nname = "acct-1"\nkind = "api_key"\ntoken_env = "CQT_UNUSED_KEY"\n')
    engine = fake_engine(settings.model_copy(update={"accounts_file": accounts}), store, sent)
    engine.start()
    try:
        loops = Loops(engine)
        now = 1_800_000_030.0  # half a minute into epoch minute 30_000_000
        store.redis.zadd(store.keys.account_slots("acct-1"), {"a-run": now + 60, "an-expired-slot": now - 1})
        assert on_loop(loops, loops.sample_slots(now))
        store.redis.zadd(store.keys.account_slots("acct-1"), {"another-run": now + 120})
        assert not on_loop(loops, loops.sample_slots(now + 20))  # the same minute: one sample a minute
        history = store.keys.account_history("acct-1", 30_000_000 // 60)
        assert store.redis.hgetall(history) == {b"slots:30000000": b"1"}
        assert 0 < store.redis.ttl(history) <= 4 * 3600
        assert on_loop(loops, loops.sample_slots(now + 60))  # the next minute: the first slot expired, one held
        assert store.redis.hget(history, "slots:30000001") == b"1"
    finally:
        engine.stop()
