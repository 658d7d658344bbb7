"""Per-pass costs that must not grow with the backlog: the reconciler's check of whether a
stale job's message still waits in the broker, and the trimming of the `jobs` index past live old jobs."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from claudeq.broker import list_for, run_message
from claudeq.config.settings import Settings
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.background.loops import Loops
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import fake_engine


class CountingRedis(fakeredis.FakeRedis):
    """Counts commands, and the elements that list reads return (what a pass costs Redis and the wire)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: Counter[str] = Counter()
        self.list_elements = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        self.commands[name] += 1
        result = super().execute_command(*args, **options)
        if name in ("LRANGE", "LINDEX", "LPOS") and result is not None:
            self.list_elements += len(result) if isinstance(result, list) else 1
        return result

    def reset(self) -> None:
        self.commands.clear()
        self.list_elements = 0


@pytest.fixture
def settings(unique: str) -> Settings:
    return make_settings("redis://127.0.0.1:1/0", unique, unclaimed_resend_s=5, result_ttl_s=3600)


@pytest.fixture
def store(settings: Settings) -> WorkerJobStore:
    return make_worker_store(settings, CountingRedis())


@pytest.fixture
def sent() -> list[str]:
    return []


@pytest.fixture
def loops(settings: Settings, store: WorkerJobStore, sent: list[str]) -> Iterator[Loops]:
    engine = fake_engine(settings, store, sent)
    engine.start()
    yield Loops(engine)
    engine.stop()


def _submit(store: WorkerJobStore, n: int, sent_at: float) -> list[str]:
    ids = []
    for i in range(n):
        record = JobRecord(
            id=f"j{i}-{time.monotonic_ns()}", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow()
        )
        ids.append(run_call(store.create_call(record))[0])
        store.redis.zadd(store.keys.queued, {ids[-1]: sent_at})
    return ids


def _backlog(store: WorkerJobStore, queue: str, n: int, sent_at: float) -> None:
    """`n` messages of other jobs waiting in the broker list, sent at `sent_at`."""
    name = list_for(queue, 0)
    for start in range(0, n, 1000):
        store.redis.lpush(
            name, *[run_message(f"other-{i}", queue, 0, sent_at) for i in range(start, min(n, start + 1000))]
        )


def _pass_cost(loops: Loops, store: WorkerJobStore) -> tuple[list[str], int, int]:
    client = store.redis
    assert isinstance(client, CountingRedis)
    client.reset()
    resent = loops.engine.call(loops.resend_once()).result(30)
    return resent, sum(client.commands.values()), client.list_elements


@pytest.mark.parametrize("backlog", [200, 20_000])
def test_reconciler_membership_check_does_not_read_the_broker_queue(
    loops: Loops, store: WorkerJobStore, settings: Settings, sent: list[str], backlog: int
) -> None:
    now = time.time()
    # 100 stale jobs sent 60 s ago; an older backlog still waits in front of their messages.
    stale = _submit(store, 100, now - 60)
    _backlog(store, settings.queue, backlog, now - 600)
    resent, commands, elements = _pass_cost(loops, store)
    assert resent == [] and sent == []  # their messages may still be behind the backlog: nothing re-sent
    assert elements <= 10, f"the pass read {elements} broker messages"  # the oldest message per list, no more
    assert commands <= 6 * len(stale) + 20, f"{commands} commands for {len(stale)} checked jobs"


def test_reconciler_cost_per_pass_is_the_same_at_200_and_20000_waiting(
    loops: Loops, store: WorkerJobStore, settings: Settings
) -> None:
    now = time.time()
    stale = _submit(store, 50, now - 60)
    _backlog(store, settings.queue, 200, now - 600)
    _, small_commands, small_elements = _pass_cost(loops, store)
    _backlog(store, settings.queue, 19_800, now - 600)
    for job_id in stale:
        store.redis.zadd(store.keys.queued, {job_id: now - 60})
    _, big_commands, big_elements = _pass_cost(loops, store)
    assert (big_commands, big_elements) == (small_commands, small_elements)


def test_reconciler_resends_a_lost_message_once_the_queue_moved_past_it(
    loops: Loops, store: WorkerJobStore, settings: Settings, sent: list[str]
) -> None:
    now = time.time()
    [lost] = _submit(store, 1, now - 60)  # its message was never pushed (say its producer died)
    _backlog(store, settings.queue, 50, now - 30)  # the oldest waiting message is younger than its send
    resent, _, _ = _pass_cost(loops, store)
    assert resent == [lost] and sent == [lost]


def test_trim_index_walks_past_live_old_jobs(store: WorkerJobStore, settings: Settings) -> None:
    old_ms = (time.time() - 2 * settings.result_ttl_s) * 1000
    live = _submit(store, 1000, time.time())
    pipe = store.redis.pipeline(transaction=False)
    for i, job_id in enumerate(live):
        pipe.zadd(store.keys.jobs, {job_id: old_ms + i})  # the oldest entries: still alive (say, long queued)
    for i in range(5000):
        pipe.zadd(store.keys.jobs, {f"expired-{i}": old_ms + 1000 + i})  # their records expired
    pipe.execute()
    removed = 0
    for _ in range(10):  # a few reconciler passes at most
        step = run(store.trim_index())
        removed += step
        if step == 0:
            break
    assert removed == 5000
    assert store.redis.zcard(store.keys.jobs) == 1000
    assert all(store.redis.zscore(store.keys.jobs, job_id) is not None for job_id in live)


def test_a_submitted_jobs_own_message_counts_as_waiting(
    loops: Loops, store: WorkerJobStore, settings: Settings
) -> None:
    from claudeq.producer.client import Client

    client = Client(settings, redis_client=store.redis, celery_app=object())
    single = client.submit(prompt="one").id
    keyed = client.submit(prompt="two", idempotency_key="k").id
    batch = [h.id for h in client.submit_many([{"prompt": "a"}, {"prompt": "b", "priority": 6}])]
    jobs = [single, keyed, *batch]
    # Each job's score is never earlier than its message's send time, so its own message at the head is "waiting".
    assert run(loops._waiting_in_broker(jobs)) == set(jobs)
    while store.redis.rpop(list_for(settings.queue, 0)) is not None:
        pass  # every priority-0 message consumed: those jobs' messages have left the queue
    assert run(loops._waiting_in_broker(jobs)) == {batch[1]}


def test_a_backlogged_tenants_message_at_the_last_priority_step_counts_as_waiting(
    loops: Loops, store: WorkerJobStore, settings: Settings
) -> None:
    from claudeq.broker import BACKLOG_PRIORITY

    # As a producer sends a backlogged tenant's job: spec priority 0, message at the last priority step.
    record = JobRecord(id="flooded", spec=JobSpec(prompt="x"), status="queued", created_at=utcnow())
    sent = time.time()
    run_call(store.create_call(record))
    store.redis.zadd(store.keys.queued, {"flooded": sent}, xx=True)
    store.redis.lpush(list_for(settings.queue, BACKLOG_PRIORITY), run_message("flooded", settings.queue, 9, sent))
    assert run(loops._waiting_in_broker(["flooded"])) == {"flooded"}  # never re-sent while it waits there
