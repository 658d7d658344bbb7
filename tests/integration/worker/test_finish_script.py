"""A job's start and end in one script each. START: an attempt's slot and its start written together, under the
run's fence. FINISH: the terminal write frees the run's account slot, hands it to the best waiter,
counts its last attempt's spend and takes the job out of the active-job index, in the same step and only while the
run's fence holds the job. Real Redis; the worker's runtime as `claudeq-worker` builds it (no tenants file: every
run is admitted as no tenant's)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from claudeq.accounts import Waiter
from claudeq.models import Attempt, Event, JobRecord, JobResult, JobSpec, utcnow
from claudeq.script_calls import Call, ScriptCall, run_call
from claudeq.worker.accounts.manager import AccountManager, SlotLease, Spent
from claudeq.worker.app import WorkerRuntime
from claudeq.worker.run.fake_runner import BENCH_FAKE_RUNNER_ENV
from claudeq.worker.store import worker_job_scripts as job_scripts
from claudeq.worker.store.job_store import START_LOST, AttemptStart, Freed, JobWrite
from tests.support.jobs import queued
from tests.support.runtime import engine_runtime

pytestmark = pytest.mark.integration

T = TypeVar("T")


@pytest.fixture
def runtime(redis_url: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerRuntime]:
    no_cli = {BENCH_FAKE_RUNNER_ENV: "0.05"}  # runs of the engine test
    with engine_runtime(
        redis_url, unique, tmp_path, monkeypatch, worker_id=f"finish-test-{unique}", max_concurrency=1, env=no_cli
    ) as rt:
        yield rt


def _accounts(rt: WorkerRuntime) -> AccountManager:
    assert isinstance(rt.engine.accounts, AccountManager)
    return rt.engine.accounts


def _running_with_slot(rt: WorkerRuntime) -> tuple[str, int, SlotLease]:
    """A claimed job holding the account's only slot, indexed under its tenant as a producer in a fleet that
    uses tenants indexes it."""
    store, accounts = rt.engine.store, _accounts(rt)
    spec = JobSpec(prompt="hi", tenant="acme")
    job_id = queued(store, tenant="acme")
    for name in ("acme", "default"):
        store.redis.zadd(store.keys.tenant_jobs(name), {job_id: 1.0})
    claim = rt.engine.call(store.send(store.claim_call(job_id, "w1", 30))).result(timeout=30)
    lease = rt.engine.call(accounts.acquire(job_id, spec)).result(timeout=30)
    assert claim.ok and isinstance(lease, SlotLease)
    return job_id, claim.fence, lease


def test_the_terminal_write_frees_the_slot_and_the_index_in_one_script(runtime: WorkerRuntime) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    slots = store.keys.account_slots("acct-a")
    job_id, fence, lease = _running_with_slot(runtime)
    release = accounts.slot_release(lease, "acme", spent=Spent(lease, 0.25, 2))
    assert release is not None

    done = runtime.engine.call(
        store.send(
            store.finish_call(
                JobWrite(
                    job_id,
                    fence,
                    "succeeded",
                    fields={"result": JobResult(text="ok")},
                    events=[Event(type="succeeded")],
                ),
                release,
            )
        )
    ).result(10)

    assert done == Freed(True, ())
    record = run_call(store.get_call(job_id))
    assert record.status == "succeeded" and record.result is not None and record.result.text == "ok"
    assert [e.type for _, e in store.read_events(job_id)] == ["submitted", "succeeded"]
    assert store.redis.zscore(slots, job_id) is None
    assert store.redis.zscore(store.keys.tenant_jobs("acme"), job_id) is None
    assert store.redis.zscore(store.keys.tenant_jobs("default"), job_id) is None
    assert store.redis.zscore(store.keys.running, job_id) is None
    # The spend: the account's (no tenants file: no tenant spend is kept; `default`'s is the accounts' sum).
    assert accounts.tenant_store.spend("account", "acct-a") == (0.25, 0.25)
    assert accounts.tenant_store.spend("tenant", "default") == (0.25, 0.25)
    assert not store.redis.exists(store.keys.tenant_spend("default"))
    assert accounts.tenant_store.turn_cost("account", "acct-a") is None  # no spend cap there: nothing to learn


def test_a_job_no_producer_indexed_is_taken_out_of_no_index(runtime: WorkerRuntime) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    job_id, fence, lease = _running_with_slot(runtime)
    release = accounts.slot_release(lease, "acme", indexed=False)
    assert release is not None and release.unindex == []
    assert (
        runtime.engine.call(store.send(store.finish_call(JobWrite(job_id, fence, "succeeded"), release)))
        .result(10)
        .done
    )
    assert store.redis.zscore(store.keys.tenant_jobs("acme"), job_id) is not None  # no ZREM was sent


def test_a_stale_fence_writes_and_frees_nothing(runtime: WorkerRuntime) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    slots = store.keys.account_slots("acct-a")
    job_id, fence, lease = _running_with_slot(runtime)
    release = accounts.slot_release(lease, "acme", spent=Spent(lease, 0.25))
    assert release is not None

    done = runtime.engine.call(store.send(store.finish_call(JobWrite(job_id, fence + 1, "failed"), release))).result(10)

    # The new owner may hold this very slot (members are job ids): a run that lost the job leaves it. Its spend is
    # not counted either: the handler counts it apart (DeliveryHandler._settle), as for any write that did not land.
    assert done == Freed(False, ())
    assert run_call(store.get_call(job_id)).status == "running"
    assert store.redis.zscore(slots, job_id) is not None
    assert store.redis.zscore(store.keys.tenant_jobs("acme"), job_id) is not None
    assert accounts.tenant_store.spend("account", "acct-a") == (0.0, 0.0)


def test_the_freed_slot_goes_to_the_waiter_in_line(runtime: WorkerRuntime) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    slots = store.keys.account_slots("acct-a")
    job_id, fence, lease = _running_with_slot(runtime)
    waiter = uuid.uuid4().hex
    run_call(store.create_call(JobRecord(id=waiter, spec=JobSpec(prompt="next"), status="queued", created_at=utcnow())))
    store.redis.hset(store.keys.job(waiter), "status", "deferred")
    store.redis.zrem(store.keys.queued, waiter)
    store.redis.zadd(store.keys.deferred, {waiter: 1e12})
    # The only slot is taken.
    assert run_call(accounts.store.add_waiter_call(["acct-a"], Waiter(waiter, rank=1.0))) == []

    release = accounts.slot_release(lease, "acme")
    assert release is not None
    done = runtime.engine.call(store.send(store.finish_call(JobWrite(job_id, fence, "succeeded"), release))).result(10)

    assert done == Freed(True, (waiter,))
    assert run_call(store.get_call(waiter)).status == "queued"
    assert store.redis.zscore(slots, waiter) is not None and store.redis.zscore(slots, job_id) is None


def test_a_tenants_run_is_freed_apart(runtime: WorkerRuntime) -> None:
    job_id, _, lease = _running_with_slot(runtime)
    # A tenant's run (admitted with tenants configured) frees its slot with its tenant's state: not in the write.
    assert _accounts(runtime).slot_release(SlotLease(lease.account, job_id, "acme"), "acme") is None


def test_the_engine_ends_a_job_in_one_round_trip(runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    slots = store.keys.account_slots("acct-a")
    job_id = queued(store)
    separately: list[str] = []

    async def release(lease: SlotLease) -> list[str]:
        separately.append("release")
        return []

    async def job_done(tenant: str, job_id: str) -> None:
        separately.append("job_done")

    async def settle(lease: SlotLease, cost_usd: float, turns: int | None = None) -> None:
        separately.append("settle")

    monkeypatch.setattr(accounts, "release", release)
    monkeypatch.setattr(accounts.admission, "job_done", job_done)
    monkeypatch.setattr(accounts.admission, "settle", settle)
    delivered = runtime.engine.deliver_blocking(job_id)

    assert str(delivered) == "succeeded", delivered
    record = run_call(store.get_call(job_id))
    assert record.status == "succeeded" and record.result is not None
    # The slot and the spend went with the terminal write, in its script: no separate release, unindex or settle.
    assert store.redis.zcard(slots) == 0 and separately == []
    cost = record.result.usage.cost_usd
    assert cost > 0 and accounts.tenant_store.spend("account", "acct-a") == (pytest.approx(cost), pytest.approx(cost))


def test_a_job_whose_end_cannot_go_in_one_script_still_counts_its_spend(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    job_id = queued(store)
    monkeypatch.setattr(accounts, "slot_release", lambda *_, **__: None)  # as for a tenant's run
    delivered = runtime.engine.deliver_blocking(job_id)

    assert str(delivered) == "succeeded", delivered
    record = run_call(store.get_call(job_id))
    assert record.result is not None and record.result.usage.cost_usd > 0
    assert accounts.tenant_store.spend("account", "acct-a")[0] == pytest.approx(record.result.usage.cost_usd)


def test_an_attempt_starts_with_its_slot_in_one_script(runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    store = runtime.engine.store
    job_id = queued(store)
    writes: list[object] = []
    send = store.send

    async def sent(call: Call[T]) -> T:
        if isinstance(call, ScriptCall) and call.script.script == job_scripts.WRITE:
            writes.append(call)
        return await send(call)

    monkeypatch.setattr(store, "send", sent)  # the attempt's start goes in START; the end in FINISH
    delivered = runtime.engine.deliver_blocking(job_id)

    assert str(delivered) == "succeeded", delivered
    assert writes == []
    record = run_call(store.get_call(job_id))
    assert [(a.number, a.account, a.outcome) for a in record.attempts] == [(1, "acct-a", "success")]
    assert record.account == "acct-a"


def test_a_start_whose_fence_is_stale_writes_nothing(runtime: WorkerRuntime) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    job_id = queued(store)
    fence = runtime.engine.call(store.send(store.claim_call(job_id, "w1", 30))).result(timeout=30).fence

    def start(fence: int) -> Callable[[ScriptCall[int]], ScriptCall[int]]:
        attempt = store.attempt_start(job_id, fence, 1, "w1", [], None)
        return lambda acquire: attempt.call(acquire, attempt.on("acct-a", None))

    stale = start(fence + 1)(accounts.store.acquire_call("acct-a", job_id, 30, may_hold=False))
    assert run_call(stale) == START_LOST
    assert run_call(store.get_call(job_id)).account is None  # nothing written
    assert run_call(start(fence)(accounts.store.acquire_call("acct-a", job_id, 30))) == 1  # the slot it took, again
    assert run_call(store.get_call(job_id)).account == "acct-a"
    assert store.redis.zcard(store.keys.account_slots("acct-a")) == 1


def test_a_delivery_whose_start_found_the_job_taken_over_is_lost(
    runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, accounts = runtime.engine.store, _accounts(runtime)
    job_id = queued(store)
    real = store.start_call

    def taken_over(acquire: ScriptCall[int], start: AttemptStart, attempt: Attempt) -> ScriptCall[int]:
        store.redis.hincrby(store.keys.job(start.job_id), "fence", 1)  # another worker claimed it meanwhile
        return real(acquire, start, attempt)

    monkeypatch.setattr(store, "start_call", taken_over)
    delivered = runtime.engine.deliver_blocking(job_id)

    assert str(delivered) == "lost", delivered
    record = run_call(store.get_call(job_id))
    assert record.status == "running" and record.attempts == [] and record.account is None
    assert accounts.tenant_store.spend("account", "acct-a") == (0.0, 0.0)  # no run
