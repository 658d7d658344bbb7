"""A job that loses its worker again and again (a hostile input that freezes or kills each worker in turn) fails as
`poisoned` at the reconciler's recovery instead of circulating forever; fewer losses still re-enqueue it. Real Redis,
the real reconciler of an engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from claudeq.config.account_pool import AccountConfig
from claudeq.models import Attempt, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.background.loops import Loops
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import FakeAccounts, FakeMetrics, FakeRunner, sends_into

pytestmark = pytest.mark.integration


@pytest.fixture
def wstore(redis_url: str, unique: str, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(make_settings(redis_url, unique), redis_client)


@pytest.fixture
def loops(wstore: WorkerJobStore, redis_url: str, unique: str) -> Iterator[Loops]:
    settings = make_settings(redis_url, unique, heartbeat_s=1, lease_ttl_s=1)
    engine = Engine(
        settings,
        store=wstore,
        ports=Ports(FakeAccounts(AccountConfig(name="a", kind="oauth", token_env="T")), FakeRunner(), FakeMetrics()),
        send=sends_into([]),
        worker_id="w-reconciler",
    )
    engine.start()
    yield Loops(engine)
    engine.stop()


def _lost_so_far(store: WorkerJobStore, earlier_losses: int, tenant: str = "default") -> str:
    """A running job whose worker just died mid-attempt (lease gone), after `earlier_losses` lost workers."""
    spec = JobSpec(prompt="p", tenant=tenant)
    record = JobRecord(id=f"j-{utcnow().timestamp()}", spec=spec, status="queued", created_at=utcnow())
    job = run_call(store.create_call(record))[0]
    attempts = [
        Attempt(number=i + 1, worker=f"w{i}", outcome="worker_lost", started_at=utcnow(), finished_at=utcnow())
        for i in range(earlier_losses)
    ]
    claim = run(store.send(store.claim_call(job, f"w{earlier_losses}", 30)))
    attempts.append(Attempt(number=earlier_losses + 1, worker=f"w{earlier_losses}", started_at=utcnow()))
    assert run(store.send(store.write_call(JobWrite(job, claim.fence, fields={"attempts": attempts}))))
    store.redis.zadd(store.keys.running, {job: 0})
    return job


def test_the_third_lost_worker_fails_the_job_as_poisoned(loops: Loops, wstore: WorkerJobStore) -> None:
    job = _lost_so_far(wstore, earlier_losses=2)

    assert loops.engine.call(loops.recover_once()).result(10) == [job]

    record = run_call(wstore.get_call(job))
    assert record.status == "failed"
    assert record.error is not None and record.error.kind == "poisoned" and not record.error.retryable
    assert "lost its worker 3 times" in record.error.message
    assert [a.outcome for a in record.attempts] == ["worker_lost"] * 3
    assert [e.type for _, e in wstore.read_events(job)][-1] == "failed"
    assert job not in wstore.running_ids() and wstore.redis.ttl(wstore.keys.job(job)) > 0


def test_a_poisoned_job_leaves_its_tenants_active_jobs(loops: Loops, wstore: WorkerJobStore) -> None:
    job = _lost_so_far(wstore, earlier_losses=2, tenant="team-p")

    assert loops.engine.call(loops.recover_once()).result(10) == [job]

    # Out of the index `claudeq tenants` counts waiting jobs from, as any other finished job.
    accounts = loops.engine.accounts
    assert isinstance(accounts, FakeAccounts)
    assert accounts.done == [("team-p", job)]


def test_a_second_lost_worker_still_requeues(loops: Loops, wstore: WorkerJobStore) -> None:
    job = _lost_so_far(wstore, earlier_losses=1)

    assert loops.engine.call(loops.recover_once()).result(10) == [job]

    record = run_call(wstore.get_call(job))
    assert record.status == "queued" and record.error is None
    accounts = loops.engine.accounts
    assert isinstance(accounts, FakeAccounts) and accounts.done == []
    assert [e.type for _, e in wstore.read_events(job)][-1] == "requeued"
