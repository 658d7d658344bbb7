"""A cancel is seen at every status write: a job cancelled while it ran, before anything stopped its run, ends
`cancelled` at the write that would have put it back to wait (deferred, re-queued, or recovered after its worker
died) instead of waiting first. Real Redis; the engine with a scripted account manager holds the window between
the claim and the deferral open (the cancel arrives while the worker asks for a slot and is told to wait for the
next hour: a spend cap with `on_budget = "wait"`)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from datetime import timedelta

import pytest
import redis

from claudeq.config.account_pool import AccountConfig
from claudeq.jobs import JobStore
from claudeq.models import Attempt, Event, JobRecord, JobSpec, utcnow
from claudeq.worker.account_choice import NoAccount
from claudeq.worker.account_manager import SlotLease, StartWrite
from claudeq.worker.engine import Engine
from claudeq.worker.job_store import WorkerJobStore, make_worker_store
from claudeq.worker.loops import Loops
from tests.conftest import make_settings
from tests.unit.worker.engine_fakes import FakeAccounts, FakeMetrics, FakeRunner

pytestmark = pytest.mark.integration

A = AccountConfig(name="a", kind="api_key", token_env="T_A", max_concurrency=2)


class OverCapWhileCancelled(FakeAccounts):
    """Every acquire finds the job's tenant over its hourly spend cap (wait for the next hour); the first one lets a
    producer cancel the job first, as if the cancel came just then."""

    def __init__(self, producer: JobStore) -> None:
        super().__init__(A)
        self.producer = producer
        self.answers: list[str] = []

    async def aacquire(
        self,
        job_id: str,
        spec: JobSpec,
        exclude: frozenset[str] = frozenset(),
        rank: float | None = None,
        holds: Collection[str] | None = None,
        start: StartWrite | None = None,
    ) -> SlotLease | NoAccount:
        self.answers.append(self.producer.cancel(job_id))
        next_hour = utcnow().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        return NoAccount(next_hour, "tenant 'thrifty' is over its spend cap (on_budget = wait)", ["a"])


@pytest.fixture
def wstore(redis_url: str, unique: str, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(make_settings(redis_url, unique), redis_client)


@pytest.fixture
def sent() -> list[str]:
    return []


@pytest.fixture
def engine(wstore: WorkerJobStore, sent: list[str], redis_url: str, unique: str) -> Iterator[Engine]:
    settings = make_settings(redis_url, unique, heartbeat_s=0.2, lease_ttl_s=2)
    engine = Engine(
        settings,
        store=wstore,
        accounts=OverCapWhileCancelled(wstore),
        runner=FakeRunner(),
        metrics=FakeMetrics(),
        send=lambda job_id, spec: sent.append(job_id),
        worker_id="w1",
    )
    engine.start()
    yield engine
    engine.stop()


def _queued(store: WorkerJobStore, tenant: str = "default") -> str:
    record = JobRecord(
        id=f"j-{time.time_ns()}", spec=JobSpec(prompt="p", tenant=tenant), status="queued", created_at=utcnow()
    )
    return store.create(record)[0]


def _types(store: WorkerJobStore, job: str) -> list[str]:
    return [e.type for _, e in store.read_events(job)]


def test_a_cancel_between_the_claim_and_the_deferral_ends_the_job_at_once_never_deferred(
    engine: Engine, wstore: WorkerJobStore, sent: list[str]
) -> None:
    job = _queued(wstore, tenant="thrifty")
    started = time.monotonic()

    outcome = str(engine.deliver_blocking(job))

    accounts = engine.accounts
    assert isinstance(accounts, OverCapWhileCancelled)
    assert accounts.answers == ["running"]  # the cancel came while the worker held the job
    assert outcome == "cancelled"
    assert time.monotonic() - started < 5  # ended by this delivery, not at the next hour
    record = wstore.get(job)
    assert record.status == "cancelled" and record.ready_at is None and record.finished_at is not None
    assert record.error is not None and record.error.kind == "cancelled"
    assert "deferred" not in _types(wstore, job)
    assert _types(wstore, job)[-1] == "cancelled"
    keys = wstore.keys
    assert wstore.redis.zscore(keys.deferred, job) is None and wstore.redis.zscore(keys.running, job) is None
    assert not wstore.cancel_requested(job) and wstore.redis.ttl(keys.job(job)) > 0  # finished: retention
    # Nothing waits for it: no waiting line, no tenant waiters, no message; it left its tenant's active jobs.
    assert accounts.waiters == [] and accounts.tenant_waiters == [] and sent == []
    assert accounts.done == [("thrifty", job)]


def test_a_requeue_of_a_job_cancelled_while_it_ran_cancels_it(wstore: WorkerJobStore) -> None:
    job = _queued(wstore)
    claim = wstore.claim(job, "w1", 30)
    assert wstore.cancel(job) == "running"

    requeued = Event(type="requeued", data={"reason": "worker shutting down; job re-enqueued"})
    assert wstore.write(job, claim.fence, "queued", event=requeued) == "cancelled"

    record = wstore.get(job)
    assert record.status == "cancelled" and record.error is not None and record.error.kind == "cancelled"
    assert wstore.redis.zscore(wstore.keys.queued, job) is None
    assert "requeued" not in _types(wstore, job) and _types(wstore, job)[-1] == "cancelled"
    # Without the flag the same write re-queues, as before.
    other = _queued(wstore)
    fence = wstore.claim(other, "w1", 30).fence
    assert wstore.write(other, fence, "queued", event=requeued) is True
    assert wstore.get(other).status == "queued"


def test_the_recovery_of_a_job_cancelled_while_its_worker_died_cancels_it(
    engine: Engine, wstore: WorkerJobStore, sent: list[str]
) -> None:
    job = _queued(wstore, tenant="team-c")
    claim = wstore.claim(job, "w-dead", 30)
    assert wstore.write(job, claim.fence, attempts=[Attempt(number=1, worker="w-dead", started_at=utcnow())])
    assert wstore.cancel(job) == "running"  # the flag is set; its worker is gone and nobody hears the wake-up
    wstore.redis.zadd(wstore.keys.running, {job: 0})  # its lease expired

    assert engine.call(Loops(engine).recover_once()).result(10) == [job]

    record = wstore.get(job)
    assert record.status == "cancelled" and record.error is not None and record.error.kind == "cancelled"
    assert [a.outcome for a in record.attempts] == ["worker_lost"]
    assert sent == []  # never sent to run again
    assert wstore.redis.zscore(wstore.keys.queued, job) is None and job not in wstore.running_ids()
    assert _types(wstore, job)[-1] == "cancelled" and "requeued" not in _types(wstore, job)
    accounts = engine.accounts
    assert isinstance(accounts, FakeAccounts) and accounts.done == [("team-c", job)]
