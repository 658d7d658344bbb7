"""A cancel is seen at every status write: a job cancelled while it ran, before anything stopped its run, ends
`cancelled` at the write that would have put it back to wait (deferred, re-queued, or recovered after its worker
died) instead of waiting first. Real Redis. The deferral case goes through the engine and the real account manager
with a tenants file whose tenant is over its hourly spend cap (`on_budget = "wait"`: the job would wait for the next
hour); the producer's cancel comes while the worker asks for the slot, between the claim and the deferral."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.jobs import JobStore
from claudeq.keys import Keys
from claudeq.models import Attempt, Event, utcnow
from claudeq.script_calls import run_call
from claudeq.tenants import hour_field
from claudeq.worker.accounts.choice import NoAccount
from claudeq.worker.accounts.manager import AccountManager, SlotLease
from claudeq.worker.background.loops import Loops
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import AccountsLike, Ports
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import FakeAccounts, FakeMetrics, FakeRunner, sends_into
from tests.support.jobs import queued

pytestmark = pytest.mark.integration

A = AccountConfig(name="a", kind="api_key", token_env="T_A", max_concurrency=2)


TENANTS = """
[[tenants]]
name = "default"

[[tenants]]
name = "thrifty"
max_cost_usd_per_hour = 0.05
on_budget = "wait"
"""


class CancelledWhileAsking(AccountManager):
    """The real account manager; a producer cancels the job just as the worker asks for its slot."""

    def __init__(self, settings: Settings, client: redis.Redis, producer: JobStore) -> None:
        super().__init__(settings, client, Keys(settings.key_prefix), AccountPool(accounts=[A]))
        self.producer = producer
        self.cancels: list[str] = []
        self.answers: list[SlotLease | NoAccount] = []

    async def acquire(self, job_id: str, *args: Any, **kwargs: Any) -> SlotLease | NoAccount:
        self.cancels.append(self.producer.cancel(job_id))
        answer = await super().acquire(job_id, *args, **kwargs)
        self.answers.append(answer)
        return answer


@pytest.fixture
def wstore(redis_url: str, unique: str, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(make_settings(redis_url, unique), redis_client)


@pytest.fixture
def sent() -> list[str]:
    return []


def _engine(settings: Settings, store: WorkerJobStore, accounts: AccountsLike, sent: list[str]) -> Engine:
    return Engine(
        settings,
        store=store,
        ports=Ports(accounts, FakeRunner(), FakeMetrics()),
        send=sends_into(sent),
        worker_id="w1",
    )


@pytest.fixture
def engine(wstore: WorkerJobStore, sent: list[str], redis_url: str, unique: str) -> Iterator[Engine]:
    engine = _engine(make_settings(redis_url, unique, heartbeat_s=0.2, lease_ttl_s=2), wstore, FakeAccounts(A), sent)
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture
def capped_engine(
    wstore: WorkerJobStore, sent: list[str], redis_url: str, unique: str, tmp_path: Path, redis_client: redis.Redis
) -> Iterator[Engine]:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    settings = make_settings(redis_url, unique, heartbeat_s=0.2, lease_ttl_s=2, tenants_file=tenants)
    now = time.time()
    for hour in (now, now + 3600):  # spent, this hour and the next (should the hour roll during the test)
        redis_client.hset(wstore.keys.tenant_spend("thrifty"), hour_field(hour), "0.05")
    engine = _engine(settings, wstore, CancelledWhileAsking(settings, redis_client, wstore), sent)
    engine.start()
    yield engine
    engine.stop()


def _types(store: WorkerJobStore, job: str) -> list[str]:
    return [e.type for _, e in store.read_events(job)]


def test_a_cancel_between_the_claim_and_the_deferral_ends_the_job_at_once_never_deferred(
    capped_engine: Engine, wstore: WorkerJobStore, sent: list[str]
) -> None:
    job = queued(wstore, tenant="thrifty")
    started = time.monotonic()

    outcome = str(capped_engine.deliver_blocking(job))

    accounts = capped_engine.accounts
    assert isinstance(accounts, CancelledWhileAsking)
    assert accounts.cancels == ["running"]  # the producer was told the job runs: the flag is set, a wake-up sent
    (answer,) = accounts.answers  # the real manager said: wait for the next hour (the spend cap)
    assert isinstance(answer, NoAccount) and not answer.permanent and "spend cap" in answer.reason
    assert outcome == "cancelled"
    assert time.monotonic() - started < 5  # ended by this delivery, not at the next hour
    record = run_call(wstore.get_call(job))
    assert record.status == "cancelled" and record.ready_at is None and record.finished_at is not None
    assert record.error is not None and record.error.kind == "cancelled"
    assert "deferred" not in _types(wstore, job)
    assert _types(wstore, job)[-1] == "cancelled"
    keys = wstore.keys
    assert wstore.redis.zscore(keys.deferred, job) is None and wstore.redis.zscore(keys.running, job) is None
    assert not wstore.cancel_requested(job) and wstore.redis.ttl(keys.job(job)) > 0  # finished: retention
    # Nothing waits for it: in no tenant's waiters, no message sent.
    assert wstore.redis.zscore(keys.tenant_waiters("thrifty"), job) is None and sent == []
    assert wstore.redis.zscore(keys.account_waiters("a"), job) is None


def test_a_requeue_of_a_job_cancelled_while_it_ran_cancels_it(wstore: WorkerJobStore) -> None:
    job = queued(wstore)
    claim = run(wstore.send(wstore.claim_call(job, "w1", 30)))
    assert wstore.cancel(job) == "running"

    requeued = Event(type="requeued", data={"reason": "worker shutting down; job re-enqueued"})
    assert run(wstore.send(wstore.write_call(JobWrite(job, claim.fence, "queued", events=[requeued])))) == "cancelled"

    record = run_call(wstore.get_call(job))
    assert record.status == "cancelled" and record.error is not None and record.error.kind == "cancelled"
    assert wstore.redis.zscore(wstore.keys.queued, job) is None
    assert "requeued" not in _types(wstore, job) and _types(wstore, job)[-1] == "cancelled"
    # Without the flag the same write re-queues, as before.
    other = queued(wstore)
    fence = run(wstore.send(wstore.claim_call(other, "w1", 30))).fence
    assert run(wstore.send(wstore.write_call(JobWrite(other, fence, "queued", events=[requeued])))) is True
    assert run_call(wstore.get_call(other)).status == "queued"


def test_the_recovery_of_a_job_cancelled_while_its_worker_died_cancels_it(
    engine: Engine, wstore: WorkerJobStore, sent: list[str]
) -> None:
    job = queued(wstore, tenant="team-c")
    claim = run(wstore.send(wstore.claim_call(job, "w-dead", 30)))
    assert run(
        wstore.send(
            wstore.write_call(
                JobWrite(
                    job, claim.fence, fields={"attempts": [Attempt(number=1, worker="w-dead", started_at=utcnow())]}
                )
            )
        )
    )
    assert wstore.cancel(job) == "running"  # the flag is set; its worker is gone and nobody hears the wake-up
    wstore.redis.zadd(wstore.keys.running, {job: 0})  # its lease expired

    assert engine.call(Loops(engine).recover_once()).result(10) == [job]

    record = run_call(wstore.get_call(job))
    assert record.status == "cancelled" and record.error is not None and record.error.kind == "cancelled"
    assert [a.outcome for a in record.attempts] == ["worker_lost"]
    assert sent == []  # never sent to run again
    assert wstore.redis.zscore(wstore.keys.queued, job) is None and job not in wstore.running_ids()
    assert _types(wstore, job)[-1] == "cancelled" and "requeued" not in _types(wstore, job)
    accounts = engine.accounts
    assert isinstance(accounts, FakeAccounts) and accounts.done == [("team-c", job)]
