"""Every background loop isolates an item it cannot handle: it is counted (claudeq_loop_item_failures_total), left
for a later pass (or paused), and the pass goes on with the other items. A failing item injected into the promoter,
the reconciler's recovery and re-send, the scheduler, the notifier and the archiver, on a real Redis and a real
engine."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.models import Attempt, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.background.loops import Loops
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.archive import archive_url
from tests.support.engine_fakes import FakeMetrics, fake_engine

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(redis_url: str, unique: str) -> Settings:
    return make_settings(
        redis_url, unique, heartbeat_s=1, lease_ttl_s=1, unclaimed_resend_s=1, callback_queues=[f"app-{unique}"]
    )


@pytest.fixture
def store(settings: Settings, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(settings, redis_client)


@pytest.fixture
def sent() -> list[str]:
    return []


@pytest.fixture
def loops(settings: Settings, store: WorkerJobStore, sent: list[str], redis_client: redis.Redis) -> Iterator[Loops]:
    engine = fake_engine(settings, store, sent)
    engine.start()
    yield Loops(engine)
    engine.stop()
    redis_client.delete(*settings.callback_queues)


def submit(store: WorkerJobStore, **spec: Any) -> str:
    record = JobRecord(
        id=f"j{time.monotonic_ns()}", spec=JobSpec(prompt="p", **spec), status="queued", created_at=utcnow()
    )
    return run_call(store.create_call(record))[0]


def on_loop(loops: Loops, coro: Any) -> Any:
    return loops.engine.call(coro).result(10)


def failing_for(bad: str, step: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`step`, raising for the item `bad` (a bug, a record this version mishandles: anything but Redis)."""

    async def wrapped(job_id: str, *args: Any, **kwargs: Any) -> Any:
        if job_id == bad:
            raise RuntimeError(f"cannot handle {job_id}")
        return await step(job_id, *args, **kwargs)

    return wrapped


def failures(loops: Loops, loop: str) -> int:
    metrics = loops.engine.metrics
    assert isinstance(metrics, FakeMetrics)
    return metrics.of("loop_item_failed").count((loop,))


def test_the_promoter_goes_on_past_a_job_it_cannot_promote(
    loops: Loops, store: WorkerJobStore, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad, good = submit(store), submit(store)
    for job, age in ((bad, 2), (good, 1)):  # the bad one first in the due order
        claim = run(store.send(store.claim_call(job, "w", 5)))
        assert run(
            store.send(
                store.write_call(
                    JobWrite(job, claim.fence, "deferred", fields={"ready_at": utcnow() - timedelta(seconds=age)})
                )
            )
        )
    monkeypatch.setattr(loops.engine, "promote_and_send", failing_for(bad, loops.engine.promote_and_send))
    on_loop(loops, loops.promote_once())
    assert run_call(store.status_call(good)) == "queued" and good in sent
    assert run_call(store.status_call(bad)) == "deferred"  # left for a later pass
    assert failures(loops, "promoter") == 1


def test_the_reconciler_goes_on_past_a_job_it_cannot_recover(
    loops: Loops, store: WorkerJobStore, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = []
    for _ in range(2):
        job = submit(store)
        claim = run(store.send(store.claim_call(job, "dead-worker", 30)))
        attempts = [Attempt(number=1, worker="dead-worker", started_at=utcnow())]
        assert run(store.send(store.write_call(JobWrite(job, claim.fence, fields={"attempts": attempts}))))
        lost.append(job)
    store.redis.zadd(store.keys.running, {lost[0]: 0, lost[1]: 1})  # both leases long expired, the bad one first
    bad, good = lost
    reads = loops.store.reads
    monkeypatch.setattr(reads, "get", failing_for(bad, reads.get))
    assert on_loop(loops, loops.recover_once()) == [good]
    assert run_call(store.status_call(good)) == "queued" and good in sent
    assert failures(loops, "reconciler") == 1


def test_the_scheduler_pauses_a_schedule_it_cannot_handle_and_fires_the_others(
    loops: Loops, store: WorkerJobStore, settings: Settings
) -> None:
    now = time.time()
    due = store.redis
    broken = {"name": "broken", "spec": {"prompt": "p"}, "cron": "0 0 1 1 * 0 2020"}  # no next tick, ever
    due.hset(store.keys.schedules, "default/broken", json.dumps(broken))
    steady = {"name": "steady", "spec": {"prompt": "p"}, "every_s": 60}
    due.hset(store.keys.schedules, "default/steady", json.dumps(steady))
    due.zadd(store.keys.schedules_due, {"default/broken": now - 2, "default/steady": now - 1})
    assert on_loop(loops, loops.schedule_once()) == 1  # steady fired
    paused = json.loads(due.hget(store.keys.schedules, "default/broken") or b"{}")
    assert paused["paused"] is True and due.zscore(store.keys.schedules_due, "default/broken") is None
    last_error = due.hget(store.keys.schedule_stats("default/broken"), "last_error")
    assert last_error is not None and b"next tick" in last_error
    assert failures(loops, "scheduler") == 1
    for key in (store.keys.schedules, store.keys.schedules_due):
        due.delete(key)
    due.delete(store.keys.schedule_stats("default/broken"), store.keys.schedule_stats("default/steady"))


def test_the_notifier_goes_on_past_a_job_it_cannot_deliver(
    loops: Loops, store: WorkerJobStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = settings.callback_queues[0]
    jobs = [submit(store, link={"task": "app.done", "queue": queue}) for _ in range(2)]
    for job in jobs:
        claim = run(store.send(store.claim_call(job, "w", 30)))
        assert run(store.send(store.write_call(JobWrite(job, claim.fence, "succeeded"))))
    bad, good = jobs
    notifier = loops.notifier
    monkeypatch.setattr(notifier, "deliver", failing_for(bad, notifier.deliver))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        n.state == "delivered" for n in run_call(store.get_call(good)).notifications
    ):
        on_loop(loops, notifier.once())
        time.sleep(0.1)
    assert [n.state for n in run_call(store.get_call(good)).notifications] == ["delivered"]
    assert store.redis.llen(queue) == 1  # the good job's callback, once
    assert failures(loops, "notifier") >= 1
    store.redis.delete(queue)


def test_the_exporter_serves_the_other_sections_when_one_fails(
    settings: Settings, redis_client: redis.Redis, store: WorkerJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from claudeq.worker.metrics.exporter import ClusterCollector

    submit(store)
    collector = ClusterCollector(settings, redis_client)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("a tenant record this version cannot read")

    monkeypatch.setattr(collector.tenants, "usage", broken)
    registry = CollectorRegistry()
    registry.register(collector)
    scraped = generate_latest(registry).decode()
    assert "claudeq_exporter_redis_up 1.0" in scraped
    assert 'claudeq_jobs{status="queued"} 1.0' in scraped  # the other sections are served
    assert 'claudeq_exporter_section_failed{section="tenants"} 1.0' in scraped


def loop_failures_left(store: WorkerJobStore) -> list[bytes]:
    return list(store.redis.scan_iter(match=f"{store.keys.prefix}loop-failures:*"))


def test_a_deferred_job_the_promoter_keeps_failing_on_ends_failed_with_its_error(
    loops: Loops, store: WorkerJobStore, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = loops.settings.loop_item_max_failures
    bad, good = submit(store), submit(store)
    for job, age in ((bad, 2), (good, 1)):
        claim = run(store.send(store.claim_call(job, "w", 5)))
        assert run(
            store.send(
                store.write_call(
                    JobWrite(job, claim.fence, "deferred", fields={"ready_at": utcnow() - timedelta(seconds=age)})
                )
            )
        )
    monkeypatch.setattr(loops.engine, "promote_and_send", failing_for(bad, loops.engine.promote_and_send))
    for _ in range(bound - 1):
        on_loop(loops, loops.promote_once())
        assert run_call(store.status_call(bad)) == "deferred"  # tried again on the next pass
    assert run_call(store.status_call(good)) == "queued" and sent.count(good) == 1  # the first pass went on past it
    on_loop(loops, loops.promote_once())
    record = run_call(store.get_call(bad))
    assert record.status == "failed" and record.error is not None and record.error.kind == "internal"
    assert "the promoter could not handle this job" in record.error.message
    assert f"RuntimeError: cannot handle {bad}" in record.error.message
    assert failures(loops, "promoter") == bound
    assert bad not in sent and not loop_failures_left(store)
    on_loop(loops, loops.promote_once())  # nothing left to fail on
    assert failures(loops, "promoter") == bound


def test_a_running_job_with_a_damaged_fence_ends_failed_and_the_reconciler_goes_on(
    loops: Loops, store: WorkerJobStore, sent: list[str]
) -> None:
    bound = loops.settings.loop_item_max_failures
    lost = []
    for _ in range(2):
        job = submit(store)
        run(store.send(store.claim_call(job, "dead-worker", 30)))
        lost.append(job)
    bad, good = lost
    store.redis.hset(store.keys.job(bad), "fence", "not-a-number")  # a record no version of the reconciler reads
    store.redis.zadd(store.keys.running, {bad: 0, good: 1})
    assert on_loop(loops, loops.recover_once()) == [good]
    assert run_call(store.status_call(good)) == "queued" and good in sent
    for _ in range(bound - 1):
        assert on_loop(loops, loops.recover_once()) == []
    record = run_call(store.get_call(bad))  # readable again: the failing write gave it a fence that parses
    assert record.status == "failed" and record.error is not None and record.error.kind == "internal"
    assert "the reconciler could not handle this job" in record.error.message and "ValueError" in record.error.message
    assert failures(loops, "reconciler") == bound
    assert store.redis.zscore(store.keys.running, bad) is None and not loop_failures_left(store)


def test_a_queued_job_the_reconciler_cannot_resend_ends_failed_and_the_others_are_resent(
    loops: Loops, store: WorkerJobStore, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = loops.settings.loop_item_max_failures
    bad, good = submit(store), submit(store)
    store.redis.zadd(store.keys.queued, {bad: 1, good: 2})  # both sent long ago, never claimed
    monkeypatch.setattr(loops, "_resend", failing_for(bad, loops._resend))
    assert on_loop(loops, loops.resend_once()) == [good]
    for _ in range(bound - 1):
        store.redis.zadd(store.keys.queued, {good: 2})  # unclaimed again: re-sent on every pass
        assert on_loop(loops, loops.resend_once()) == [good]
    record = run_call(store.get_call(bad))
    assert record.status == "failed" and record.error is not None and record.error.kind == "internal"
    assert "the reconciler could not handle this job" in record.error.message
    assert failures(loops, "reconciler") == bound and bad not in sent
    assert store.redis.zscore(store.keys.queued, bad) is None and store.redis.zscore(store.keys.running, bad) is None
    assert not loop_failures_left(store)


def test_a_running_id_whose_key_is_no_record_leaves_the_index_and_the_reconciler_goes_on(
    loops: Loops, store: WorkerJobStore, sent: list[str]
) -> None:
    bound = loops.settings.loop_item_max_failures
    good = submit(store)
    run(store.send(store.claim_call(good, "dead-worker", 30)))
    bad = f"j{time.monotonic_ns()}"
    store.redis.set(store.keys.job(bad), "not a job record")  # every read of it is WRONGTYPE
    store.redis.zadd(store.keys.running, {bad: 0, good: 1})  # the damaged one first
    assert on_loop(loops, loops.recover_once()) == [good]  # the pass went on past it
    assert run_call(store.status_call(good)) == "queued" and good in sent
    for _ in range(bound - 1):
        assert store.redis.zscore(store.keys.running, bad) is not None  # tried again next pass
        assert on_loop(loops, loops.recover_once()) == []
    assert store.redis.zscore(store.keys.running, bad) is None  # no record to fail: out of the index
    assert failures(loops, "reconciler") == bound and not loop_failures_left(store)
    store.redis.delete(store.keys.job(bad))


def test_the_archiver_goes_on_past_a_job_it_cannot_move(
    settings: Settings,
    redis_client: redis.Redis,
    sent: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archived = settings.model_copy(update={"archive_url": archive_url("sqlite", tmp_path)})
    store = make_worker_store(archived, redis_client)
    assert store.archive is not None
    jobs = [submit(store) for _ in range(2)]
    for job in jobs:
        claim = run(store.send(store.claim_call(job, "w", 30)))
        assert run(store.send(store.write_call(JobWrite(job, claim.fence, "succeeded"))))
        run(store.schedule_archive(job, 0))
    bad, good = jobs
    tried: list[str] = []
    move = store.archive_job

    def archive_job(job_id: str) -> bool:
        tried.append(job_id)
        if job_id == bad:
            raise RuntimeError(f"cannot move {job_id}")
        return move(job_id)

    monkeypatch.setattr(store, "archive_job", archive_job)
    engine = fake_engine(archived, store, sent)
    engine.start()
    try:
        loops = Loops(engine)
        on_loop(loops, loops.archive_once())
        assert sorted(tried) == sorted(jobs)  # the good job was moved though the bad one failed first or after
        later = redis_client.zscore(store.keys.archive_due, f"j:{bad}")
        assert later is not None and later > time.time() + 1  # tried again on a later pass
        assert redis_client.zscore(store.keys.archive_due, f"j:{good}") is None
        assert failures(loops, "archiver") == 1
    finally:
        engine.stop()
        store.archive.drop(archived.key_prefix)
        redis_client.delete(store.keys.archive_due)
