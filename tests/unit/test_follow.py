"""claudeq/follow.py on fakeredis: the one loop that follows a job's events — every event once and in order, across
the stream and the record, however many; resumed from a cursor; ended by the job's end; and its blocking driver."""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import fakeredis
import pytest

import claudeq
from claudeq.config.settings import Settings
from claudeq.follow import PAGE, Ended, Followed, KeepAlive, blocking, follow
from claudeq.models import Event, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.support.aio import run


@pytest.fixture
def worker_store(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> WorkerJobStore:
    """A WorkerJobStore on fakeredis (it writes what a run writes; its reads are the producer's)."""
    return make_worker_store(fake_settings, fake_redis)


def _running(store: WorkerJobStore) -> tuple[str, int]:
    job_id, created = run_call(
        store.create_call(JobRecord(id="j1", spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow()))
    )
    assert created
    claim = run(store.send(store.claim_call(job_id, "w1", 10)))
    return job_id, claim.fence


def _followed(store: WorkerJobStore, job_id: str, after: str = "0-0") -> list[Followed]:
    return list(blocking(follow(store, job_id, after, poll_s=0.01)))


def test_following_ends_when_the_job_is_finished(worker_store: WorkerJobStore) -> None:
    job_id, fence = _running(worker_store)
    worker_store.append_event(job_id, Event(type="claimed"))
    run(worker_store.send(worker_store.write_call(JobWrite(job_id, fence, "succeeded"))))
    # A millisecond later (a new stream's first entry id is the clock's: within the same millisecond it would repeat
    # `claimed`'s id; runs append only through the fence, which refuses a finished job, so only this unfenced append
    # can make a stream after the end).
    time.sleep(0.002)
    worker_store.append_event(job_id, Event(type="run_started"))
    # `run_started` came after the stream was compacted into the record (a stale run): both are read, in order.
    items = _followed(worker_store, job_id)
    assert [i[1].type for i in items if isinstance(i, tuple)] == ["submitted", "claimed", "run_started"]
    assert items[-1] == Ended("succeeded")


def test_a_finished_job_with_more_events_than_a_page_is_followed_to_its_last(worker_store: WorkerJobStore) -> None:
    job_id, fence = _running(worker_store)
    many = [Event(type="assistant_text", data={"n": n}) for n in range(PAGE + 20)]
    assert run(worker_store.send(worker_store.append_call(job_id, fence, many)))
    assert run(
        worker_store.send(
            worker_store.write_call(JobWrite(job_id, fence, "succeeded", events=[Event(type="succeeded")]))
        )
    )
    items = _followed(worker_store, job_id)
    events = [i[1] for i in items if isinstance(i, tuple)]
    assert [e.data.get("n") for e in events[1:-1]] == list(range(PAGE + 20))
    assert [events[0].type, events[-1].type] == ["submitted", "succeeded"]
    assert items[-1] == Ended("succeeded")


def test_following_resumes_after_a_cursor_and_sees_no_event_twice(worker_store: WorkerJobStore) -> None:
    job_id, fence = _running(worker_store)
    assert run(
        worker_store.send(worker_store.append_call(job_id, fence, [Event(type="claimed"), Event(type="run_started")]))
    )
    assert run(
        worker_store.send(
            worker_store.write_call(JobWrite(job_id, fence, "succeeded", events=[Event(type="succeeded")]))
        )
    )
    whole = [i for i in _followed(worker_store, job_id) if isinstance(i, tuple)]
    cursor = whole[1][0]  # `claimed`'s entry id: what SSE's Last-Event-ID carries back
    rest = [i for i in _followed(worker_store, job_id, after=cursor) if isinstance(i, tuple)]
    assert rest == whole[2:]
    assert [e.type for _, e in rest] == ["run_started", "succeeded"]


def test_a_job_that_is_gone_ends_the_follow(worker_store: WorkerJobStore) -> None:
    assert _followed(worker_store, "no-such-job") == [Ended("gone")]


def test_a_quiet_job_is_said_to_be_alive_with_its_status(worker_store: WorkerJobStore) -> None:
    job_id, _ = _running(worker_store)
    items: list[Followed] = []
    for item in blocking(follow(worker_store, job_id, poll_s=0.01, keepalive_s=0.0)):
        items.append(item)
        if isinstance(item, KeepAlive):
            break
    assert [type(i) for i in items] == [tuple, KeepAlive]
    assert items[-1] == KeepAlive("running")


def test_a_deadline_ends_the_follow_after_one_more_pass_without_an_end(worker_store: WorkerJobStore) -> None:
    job_id, _ = _running(worker_store)
    items = list(blocking(follow(worker_store, job_id, poll_s=0.01, until=time.monotonic())))
    assert [i[1].type for i in items if isinstance(i, tuple)] == ["submitted"]
    assert not any(isinstance(i, Ended) for i in items)  # the job goes on


def test_the_blocking_driver_works_inside_a_running_loop_and_closes_what_it_drives() -> None:
    closed: list[bool] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            for n in range(10):
                await asyncio.sleep(0)
                yield n
        finally:
            closed.append(True)

    async def inside_a_loop() -> list[int]:
        taken: list[int] = []
        for n in blocking(numbers()):  # a sync caller on a thread that runs a loop
            taken.append(n)
            if n == 2:
                break
        return taken

    assert asyncio.run(inside_a_loop()) == [0, 1, 2]
    assert closed == [True]


def _announces(path: Path) -> bool:
    """Whether the module at `path` reads a store's `announce_follow` (to call it, or hand it to a thread)."""
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.Attribute) and n.attr == "announce_follow" for n in ast.walk(tree))


def test_the_front_ends_follow_only_through_the_one_loop() -> None:
    """A follower announces itself; in the producer and the contract only claudeq/follow.py does (a loop of its own
    elsewhere would have to, to get the events within 0.1 s)."""
    root = Path(claudeq.__file__).resolve().parent.parent
    announcing = sorted(
        path.relative_to(root).as_posix()
        for folder in ("claudeq", "producer")
        for path in (root / folder).rglob("*.py")
        if not any(p.is_symlink() for p in [path, *path.parents]) and _announces(path)
    )
    assert announcing == ["claudeq/follow.py"]
