"""Events under the fence, on a real Redis: a run that lost its job (another worker claimed it with a newer fence)
appends nothing more to the job's stream — no progress, no terminal event — and the terminal event goes in with the
fenced status write, in one script: a follower never sees `failed` then `succeeded`, nor a status without its event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import Event, JobRecord, JobResult, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import FakeAccounts, FakeMetrics, FakeRunner, sends_into
from tests.support.procs import run_until

pytestmark = pytest.mark.integration

A = AccountConfig(name="a", kind="oauth", token_env="T_A")


@pytest.fixture
def wstore(redis_url: str, unique: str, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(make_settings(redis_url, unique), redis_client)


def _job(store: WorkerJobStore) -> str:
    record = JobRecord(
        id=f"job-{utcnow().timestamp()}", spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow()
    )
    return run_call(store.create_call(record))[0]


def _types(store: WorkerJobStore, job_id: str) -> list[str]:
    return [e.type for _, e in store.read_events(job_id)]


def test_a_superseded_fence_appends_no_event(wstore: WorkerJobStore) -> None:
    job = _job(wstore)
    old = run(wstore.send(wstore.claim_call(job, "w1", 30)))
    assert run(wstore.send(wstore.append_call(job, old.fence, [Event(type="assistant_text", data={"text": "mine"})])))
    wstore.redis.zadd(wstore.keys.running, {job: 0})
    assert run(wstore.recover(job, old.fence, None))
    new = run(wstore.send(wstore.claim_call(job, "w2", 30)))

    assert (
        run(wstore.send(wstore.append_call(job, old.fence, [Event(type="assistant_text", data={"text": "stale"})])))
        is None
    )
    assert run(
        wstore.send(wstore.append_call(job, new.fence, [Event(type="assistant_text", data={"text": "new owner"})]))
    )
    texts = [e.data.get("text") for _, e in wstore.read_events(job) if e.type == "assistant_text"]
    assert texts == ["mine", "new owner"]


def test_the_terminal_event_goes_in_with_the_fenced_status_write(wstore: WorkerJobStore) -> None:
    job = _job(wstore)
    old = run(wstore.send(wstore.claim_call(job, "w1", 30)))
    wstore.redis.zadd(wstore.keys.running, {job: 0})
    assert run(wstore.recover(job, old.fence, None))
    new = run(wstore.send(wstore.claim_call(job, "w2", 30)))

    stale = Event(type="failed", data={"kind": "transient", "message": "stale"})
    assert not run(wstore.send(wstore.write_call(JobWrite(job, old.fence, "failed", events=[stale]))))
    assert "failed" not in _types(wstore, job)
    assert run(wstore.send(wstore.write_call(JobWrite(job, new.fence, "succeeded", events=[Event(type="succeeded")]))))
    assert _types(wstore, job)[-1] == "succeeded" and run_call(wstore.status_call(job)) == "succeeded"


class _Takeover:
    """A run that another worker takes over mid-way (lease gone, recovered, claimed again with a new fence); then the
    old run goes on emitting and reports a success, as a paused worker would after it wakes up."""

    def __init__(self, store: WorkerJobStore) -> None:
        self.store = store

    async def __call__(self, req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        await emit(Event(type="assistant_text", data={"text": "before"}))
        job = req.job_id

        # Events are stored within a short linger (batched): wait until "before" is in, as a run that went on for a
        # moment would have it stored before it was paused.
        def stored() -> bool:
            return "before" in [e.data.get("text") for _, e in self.store.read_events(job)]

        await asyncio.to_thread(run_until, stored, 30, 0.02, what="the event emitted before the pause stored")
        await asyncio.to_thread(self.store.redis.zadd, self.store.keys.running, {job: 0})
        record = await asyncio.to_thread(run_call, self.store.get_call(job))
        assert await self.store.recover(job, record.fence, None)
        assert (await self.store.send(self.store.claim_call(job, "w2", 30))).ok
        await emit(Event(type="assistant_text", data={"text": "after the takeover"}))
        return RunOutcome(result=JobResult(text="done"), session_id="s", got_result=True, subtype="success")


@pytest.fixture
def engine(wstore: WorkerJobStore, redis_url: str, unique: str) -> Iterator[Engine]:
    # A heartbeat slower than the run: nothing but the fence tells the old run it lost the job.
    settings: Settings = make_settings(redis_url, unique, heartbeat_s=30, lease_ttl_s=60, max_attempts=1)
    engine = Engine(
        settings,
        store=wstore,
        ports=Ports(FakeAccounts(A), FakeRunner(_Takeover(wstore)), FakeMetrics()),
        send=sends_into([]),
        worker_id="w1",
    )
    engine.start()
    yield engine
    engine.stop()


def test_a_run_taken_over_appends_neither_progress_nor_a_terminal_event(engine: Engine, wstore: WorkerJobStore) -> None:
    job = _job(wstore)

    assert engine.deliver_blocking(job).outcome == "lost"

    events = [e for _, e in wstore.read_events(job)]
    assert [e.data.get("text") for e in events if e.type == "assistant_text"] == ["before"]
    assert not {"succeeded", "failed", "cancelled", "attempt_finished"} & {e.type for e in events}
    record = run_call(wstore.get_call(job))
    assert (record.status, record.worker) == ("running", "w2")
