"""The engine's Redis client: a run's hot path (claim, heartbeat, fenced writes, event appends, cancel check, and
at its end spend, slot release and the tenant index) goes on the worker's async client, on the engine loop, with no
thread hop; the async pool makes calls past its size wait for a connection rather than fail; the sync calls left
(the accounts' snapshot, sends, the loops) run on a few threads of their own. Real Redis; the worker's runtime as
`claudeq-worker` builds it."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from claudeq.models import Attempt, Event, JobRecord, JobResult, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.accounts.choice import NoAccount
from claudeq.worker.accounts.manager import AccountManager, SlotLease
from claudeq.worker.app import WorkerRuntime
from claudeq.worker.delivery.engine import engine_executor_workers
from claudeq.worker.loop_host import REDIS_THREADS, LoopHost, in_redis_thread
from claudeq.worker.store.job_store import JobWrite, LeaseState
from tests.support.runtime import engine_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(redis_url: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerRuntime]:
    with engine_runtime(
        redis_url, unique, tmp_path, monkeypatch, worker_id=f"client-test-{unique}", max_concurrency=4
    ) as rt:
        yield rt


def test_a_runs_hot_path_makes_no_thread_hop_and_writes_what_the_sync_path_writes(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = runtime.engine.store
    job_id = uuid.uuid4().hex
    run_call(store.create_call(JobRecord(id=job_id, spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow())))
    store.redis.hset(store.keys.job(job_id), "cancel", "1")  # a cancel flag the claim and the heartbeat both report

    def no_thread(*_: Any, **__: Any) -> Any:
        raise AssertionError("a hot-path call went through a thread")

    monkeypatch.setattr("asyncio.to_thread", no_thread)  # the fallback of a store without an async client

    async def one_run() -> dict[str, Any]:
        claim = await store.send(store.claim_call(job_id, "w1", 30))
        assert claim.ok and claim.fields is not None and claim.cancelled is True
        attempt = Attempt(number=1, account="a", worker="w1", started_at=utcnow())
        wrote = await store.send(
            store.write_call(
                JobWrite(job_id, claim.fence, fields={"attempts": [attempt]}, events=[Event(type="claimed")])
            )
        )
        appended = await store.send(store.append_call(job_id, claim.fence, [Event(type="run_started")]))
        beat = await store.send(store.beat_call(job_id, "w1", claim.fence, 30))
        stale_beat = await store.send(store.beat_call(job_id, "w1", claim.fence + 1, 30))
        lease = await store.lease_state(job_id)
        done = await store.send(
            store.write_call(
                JobWrite(
                    job_id,
                    claim.fence,
                    "succeeded",
                    fields={"result": JobResult(text="ok")},
                    events=[Event(type="succeeded")],
                )
            )
        )
        stale = await store.send(store.write_call(JobWrite(job_id, claim.fence, "failed")))
        return dict(
            fence=claim.fence,
            wrote=wrote,
            appended=appended,
            beat=beat,
            stale_beat=stale_beat,
            lease=lease,
            done=done,
            stale=stale,
        )

    got = runtime.engine.call(one_run()).result(timeout=30)
    assert got["wrote"] and got["done"] and got["appended"] is not None
    assert got["beat"].ours and got["beat"].cancelled
    assert not got["stale_beat"].ours
    assert got["lease"] == LeaseState(got["fence"], "running", cancel_requested=True)
    assert got["stale"] is False  # the job moved on: a late write is refused
    record = run_call(store.get_call(job_id))
    assert record.status == "succeeded"
    assert record.result is not None and record.result.text == "ok"
    assert [a.account for a in record.attempts] == ["a"]
    assert [e.type for _, e in store.read_events(job_id)] == ["submitted", "claimed", "run_started", "succeeded"]
    assert not store.redis.exists(store.keys.events(job_id))
    assert store.redis.zscore(store.keys.running, job_id) is None  # its lease went with `running`


def test_a_runs_slot_spend_release_and_unindex_go_on_the_async_client_without_a_to_thread_hop(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = runtime.engine.accounts
    store = runtime.engine.store
    keys = store.keys
    job_id = uuid.uuid4().hex
    store.redis.zadd(keys.tenant_jobs("default"), {job_id: time.time()})  # as a producer with tenants indexes it

    def no_thread(*_: Any, **__: Any) -> Any:
        raise AssertionError("a run's slot or end went through asyncio.to_thread")

    monkeypatch.setattr("asyncio.to_thread", no_thread)

    async def a_run() -> tuple[SlotLease | NoAccount, bool, list[str]]:
        lease = await accounts.acquire(job_id, JobSpec(prompt="hi"), holds=frozenset())
        assert isinstance(lease, SlotLease)
        held = store.redis.zscore(keys.account_slots("acct-a"), job_id) is not None
        await accounts.admission.settle(lease, 0.25, turns=2)
        woken = await accounts.release(lease)
        await accounts.admission.job_done("default", job_id)
        return lease, held, woken

    lease, held, woken = runtime.engine.call(a_run()).result(timeout=30)
    monkeypatch.undo()
    assert isinstance(lease, SlotLease) and lease.account.name == "acct-a" and lease.tenant is None
    assert held and woken == []
    assert accounts.tenant_store.spend("account", "acct-a")[0] == pytest.approx(0.25)
    assert accounts.tenant_store.spend("tenant", "default")[0] == pytest.approx(0.25)
    assert store.redis.zscore(keys.account_slots("acct-a"), job_id) is None
    assert store.redis.zscore(keys.tenant_jobs("default"), job_id) is None


def test_the_reconciler_and_heartbeat_passes_go_on_the_async_client_without_a_thread(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconciler pass (a lost worker's job recovered and re-sent, an unclaimed job re-sent, the index trimmed,
    old counters pruned) and a worker heartbeat: every Redis call on the loop's async client, none in a thread."""
    store, loops, keys = runtime.engine.store, runtime.loops, runtime.engine.store.keys
    store.redis.set(keys.reconciler_turn, "the-test", px=60_000)  # the runtime's own reconciler stays out
    lost, unclaimed = uuid.uuid4().hex, uuid.uuid4().hex
    for job_id in (lost, unclaimed):
        run_call(
            store.create_call(JobRecord(id=job_id, spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow()))
        )
    claim = runtime.engine.call(store.send(store.claim_call(lost, "gone-worker", 30))).result(timeout=30)
    assert claim.ok
    store.redis.zadd(keys.running, {lost: time.time() - 1})  # its lease ran out: its worker is gone
    old = time.time() - runtime.settings.unclaimed_resend_s - 60
    store.redis.zadd(keys.queued, {unclaimed: old})  # its message was sent long ago and is not in the broker
    broker = runtime.settings.queue
    store.redis.delete(broker)

    def no_thread(*_: Any, **__: Any) -> Any:
        raise AssertionError("a background loop's Redis call went through a thread")

    monkeypatch.setattr("asyncio.to_thread", no_thread)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", no_thread)

    async def passes() -> tuple[list[str], list[str]]:
        # A reconciler pass's parts (reconcile_once runs them when this worker holds the fleet's turn).
        recovered, resent = await loops.recover_once(), await loops.resend_once()
        await store.trim_index()
        await store.prune_finished_counts()
        await loops.beat_once()
        return recovered, resent

    recovered, resent = runtime.engine.call(passes()).result(timeout=30)
    monkeypatch.undo()
    assert lost in recovered and unclaimed in resent
    record = run_call(store.get_call(lost))
    assert record.status == "queued" and [a.outcome for a in record.attempts] == ["worker_lost"]
    assert [e.type for _, e in store.read_events(lost)][-1] == "requeued"
    messages = [m.decode() for m in store.redis.lrange(broker, 0, -1)]
    assert sum(lost in m for m in messages) == 1 and sum(unclaimed in m for m in messages) == 1
    assert store.redis.zscore(keys.queued, unclaimed) > old  # marked sent again with the message
    assert store.redis.hget(keys.worker(runtime.engine.worker_id), "state") == b"running"


def test_acquires_at_the_same_time_share_one_read_of_the_accounts(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of claims wants the accounts' snapshot at once: one read in flight serves them all."""
    accounts = runtime.engine.accounts
    assert isinstance(accounts, AccountManager)
    reads: list[float] = []
    snapshot_now = accounts._snapshot_now

    async def slow_snapshot(now: float) -> Any:
        reads.append(now)
        await asyncio.sleep(0.1)  # a slow Redis: the other acquires arrive while this read is in flight
        return await snapshot_now(now)

    monkeypatch.setattr(accounts, "_snapshot_now", slow_snapshot)
    spec = JobSpec(prompt="hi")

    async def burst() -> list[SlotLease | NoAccount]:
        return await asyncio.gather(*(accounts.acquire(f"burst-{n}", spec) for n in range(4)))

    taken = runtime.engine.call(burst()).result(timeout=30)
    assert all(isinstance(t, SlotLease) for t in taken), taken
    assert len(reads) == 1, reads


def test_calls_past_the_async_pools_size_wait_for_a_connection_instead_of_failing(runtime: WorkerRuntime) -> None:
    store = runtime.engine.store
    client = store._async
    assert client is not None
    size = engine_executor_workers(runtime.settings.concurrency)
    calls = 3 * size
    key = f"{runtime.settings.key_prefix}nothing-{uuid.uuid4().hex[:6]}"

    async def all_at_once() -> list[object]:
        # Each call holds its connection for 0.3 s (a blocking pop on an empty list).
        return await asyncio.gather(*(client.blpop([key], 0.3) for _ in range(calls)), return_exceptions=True)

    results = runtime.engine.call(all_at_once()).result(timeout=60)
    failed = [r for r in results if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} of {calls} calls failed, e.g. {failed[0]!r}"
    assert results == [None] * calls


def test_sync_redis_calls_run_on_the_loops_few_redis_threads() -> None:
    host = LoopHost(executor_workers=50)
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    def call() -> str:
        with lock:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
        time.sleep(0.02)
        with lock:
            at_once[0] -= 1
        return threading.current_thread().name

    async def many() -> list[str]:
        return await asyncio.gather(*(in_redis_thread(call) for _ in range(5 * REDIS_THREADS)))

    try:
        names = host.call(many()).result(timeout=30)
    finally:
        host.stop()
    assert all(name.startswith("cq-redis") for name in names)
    assert len(set(names)) <= REDIS_THREADS
    assert at_once[1] <= REDIS_THREADS
