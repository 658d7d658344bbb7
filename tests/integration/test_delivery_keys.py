"""Deliveries are keyed by job and fence: a job recovered and delivered back to the same worker while its old
delivery is still stopping gets an entry of its own, which the old delivery's end does not remove — so a shutdown
still stops and requeues the new run. Real Redis, the engine with a scripted runner (the window between a lost
lease and the end of a slow CLI shutdown is held open on purpose)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis

from claudeq.config.account_pool import AccountConfig
from claudeq.models import Event, JobRecord, JobResult, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import FakeAccounts, FakeMetrics, FakeRunner, sends_into

pytestmark = pytest.mark.integration

A = AccountConfig(name="a", kind="oauth", token_env="T_A", max_concurrency=4)


class Scripts:
    def __init__(self) -> None:
        self.first_running = threading.Event()
        self.first_stopping = threading.Event()
        self.let_first_end = threading.Event()
        self.second_running = threading.Event()

    async def slow_to_stop(
        self, req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event
    ) -> RunOutcome:
        self.first_running.set()
        await cancel.wait()
        self.first_stopping.set()
        await asyncio.to_thread(self.let_first_end.wait, 10)  # a CLI that takes its time to shut down
        return RunOutcome(result=JobResult(text="old"), stopped_by="cancel")

    async def runs_until_stopped(
        self, req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event
    ) -> RunOutcome:
        self.second_running.set()
        await cancel.wait()
        return RunOutcome(result=JobResult(text="new"), stopped_by="cancel")


@pytest.fixture
def wstore(redis_url: str, unique: str, redis_client: redis.Redis) -> WorkerJobStore:
    return make_worker_store(make_settings(redis_url, unique), redis_client)


@pytest.fixture
def scripts() -> Scripts:
    return Scripts()


@pytest.fixture
def engine(wstore: WorkerJobStore, scripts: Scripts, redis_url: str, unique: str) -> Iterator[Engine]:
    settings = make_settings(redis_url, unique, heartbeat_s=0.05, lease_ttl_s=2, concurrency=4)
    engine = Engine(
        settings,
        store=wstore,
        ports=Ports(FakeAccounts(A), FakeRunner(scripts.slow_to_stop, scripts.runs_until_stopped), FakeMetrics()),
        send=sends_into([]),
        worker_id="w1",
    )
    engine.start()
    yield engine
    engine.stop()


def _in_thread(fn: Callable[[], str]) -> Callable[[], str]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()

    def join() -> str:
        thread.join(15)
        assert result, "the delivery never ended"
        return result[0]

    return join


def test_a_redelivery_during_the_old_ones_stop_is_stopped_and_requeued_at_shutdown(
    engine: Engine, wstore: WorkerJobStore, scripts: Scripts
) -> None:
    record = JobRecord(id=f"j-{utcnow().timestamp()}", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow())
    job = run_call(wstore.create_call(record))[0]
    first = _in_thread(lambda: str(engine.deliver_blocking(job)))
    assert scripts.first_running.wait(10)
    # The worker froze past its lease: another reconciler recovered the job and its message came back here.
    wstore.redis.zadd(wstore.keys.running, {job: 0})
    assert run(wstore.recover(job, run_call(wstore.get_call(job)).fence, None))
    assert scripts.first_stopping.wait(10)  # the old run saw the lease go and is stopping, slowly
    second = _in_thread(lambda: str(engine.deliver_blocking(job)))
    assert scripts.second_running.wait(10)
    scripts.let_first_end.set()
    assert first() == "lost"

    assert engine.in_flight == 1  # the old delivery's end removed its own entry only
    engine.begin_shutdown(0).result(15)

    assert second() == "requeued"
    after = run_call(wstore.get_call(job))
    assert (after.status, after.fence) == ("queued", 2)
    assert [e.type for _, e in wstore.read_events(job)][-1] == "requeued"
