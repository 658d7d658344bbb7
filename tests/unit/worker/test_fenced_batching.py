"""FencedWriter batches a delivery's events (worker/delivery/fenced.py): a burst goes in one fenced append, events
pending when a fenced write comes ride in that write, in the order they were emitted, and nothing of a delivery
that lost its job is stored."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.models import Event, JobRecord, JobSpec, utcnow
from claudeq.script_calls import ScriptCall, run_call
from claudeq.worker.delivery.fenced import FencedWriter
from claudeq.worker.delivery.state import Delivery, Lease
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store
from tests.support.aio import eventually


class _CountingStore(WorkerJobStore):
    appends: list[int]

    def append_call(self, job_id: str, fence: int, events: Sequence[Event]) -> ScriptCall[str | None]:
        self.appends.append(len(events))
        return super().append_call(job_id, fence, events)


@pytest.fixture
def store(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> _CountingStore:
    plain = make_worker_store(fake_settings, fake_redis)
    counting = _CountingStore(
        fake_redis, plain.keys, result_ttl_s=plain.result_ttl_s, events_maxlen=plain.events_maxlen
    )
    counting.appends = []
    return counting


async def _delivery(store: WorkerJobStore, job_id: str = "j1") -> Delivery:
    record = JobRecord(id=job_id, spec=JobSpec(prompt="hi"), status="queued", created_at=utcnow())
    run_call(store.create_call(record))
    claim = await store.send(store.claim_call(job_id, "w1", 30))
    return Delivery(job_id, Lease(claim.fence), record, [])


def _types(store: WorkerJobStore, job_id: str) -> list[str]:
    return [e.type for _, e in store.read_events(job_id)]


async def test_a_burst_of_events_costs_one_append(store: _CountingStore) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0.01)
    for kind in ("run_started", "session", "assistant_text"):
        writer.event(d, Event(type=kind))  # type: ignore[arg-type]
    assert d.events.flusher is not None
    await d.events.flusher
    assert store.appends == [3]
    assert _types(store, "j1") == ["submitted", "run_started", "session", "assistant_text"]


async def test_pending_events_ride_in_the_next_write_before_its_own_event(store: _CountingStore) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=60)  # the linger never ends within the test
    writer.event(d, Event(type="claimed"))
    assert await writer.write(d, account="a")  # an attempt write: the event goes to the stream with it
    writer.event(d, Event(type="assistant_text"))
    writer.event(d, Event(type="result"))
    assert await writer.write(d, "succeeded", Event(type="succeeded"))
    await writer.close(d)
    assert store.appends == []
    assert _types(store, "j1") == ["submitted", "claimed", "assistant_text", "result", "succeeded"]
    assert not store.redis.exists(store.keys.events("j1"))


async def test_a_delivery_that_lost_its_job_stores_none_of_its_pending_events(store: _CountingStore) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=60)
    writer.event(d, Event(type="assistant_text", data={"text": "stale"}))
    store.redis.zadd(store.keys.running, {"j1": 0})
    assert await store.recover("j1", d.lease.fence, None)
    assert (await store.send(store.claim_call("j1", "w2", 30))).ok
    await writer.close(d)  # the pending event is refused: another worker owns the job
    assert d.lost
    assert "assistant_text" not in _types(store, "j1")
    writer.event(d, Event(type="result"))
    assert not d.events.pending  # nothing is even queued once lost


async def test_the_flush_and_a_write_never_reorder_events(store: _CountingStore) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0)
    tasks: list[Any] = []
    for i in range(20):
        writer.event(d, Event(type="assistant_text", data={"i": i}))
        if i % 7 == 0:
            tasks.append(asyncio.create_task(writer.write(d, account="a")))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert await writer.write(d, "succeeded", Event(type="succeeded"))
    got = [e.data["i"] for _, e in store.read_events("j1") if e.type == "assistant_text"]
    assert got == list(range(20))


async def test_nobody_following_a_short_run_stores_its_events_once_in_the_terminal_write(
    store: _CountingStore,
) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0.01, idle_linger_s=60)
    writer.event(d, Event(type="claimed"))
    assert await writer.write(d, hold_events=True, account="a")  # the attempt's start: events wait (no follower)
    for kind in ("run_started", "session"):
        writer.event(d, Event(type=kind))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # well past the followed linger
    assert _types(store, "j1") == ["submitted"] and store.appends == []
    assert await writer.write(d, "succeeded", Event(type="succeeded"))
    await writer.close(d)
    assert store.appends == [] and not store.redis.exists(store.keys.events("j1"))  # no stream ever
    assert _types(store, "j1") == ["submitted", "claimed", "run_started", "session", "succeeded"]
    assert run_call(store.get_call("j1")).account == "a"


async def test_a_follower_has_the_waiting_events_stored_at_once_and_the_next_ones_within_the_linger(
    store: _CountingStore,
) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0.01, idle_linger_s=60)
    writer.event(d, Event(type="run_started"))
    await asyncio.sleep(0.05)
    assert _types(store, "j1") == ["submitted"]  # waiting: nobody follows
    writer.followed(d, hold_s=30)
    want = ["submitted", "run_started"]
    assert await eventually(lambda: _types(store, "j1"), want) == want
    writer.event(d, Event(type="session"))
    want = ["submitted", "run_started", "session"]
    assert await eventually(lambda: _types(store, "j1"), want) == want
    writer.event(d, Event(type="claimed"))
    assert await writer.write(d, hold_events=True, account="a")  # followed: the attempt's start takes what waits
    assert _types(store, "j1")[-1] == "claimed"
    assert store.appends == [1, 1]
    later = set(d.events.later_flushers)  # the flush set for later before the follower came
    await writer.close(d)
    await asyncio.sleep(0)
    assert later and all(t.cancelled() for t in later)  # close() stops it


async def test_events_emitted_during_a_flush_get_their_own(store: _CountingStore) -> None:
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0.01)
    writer.event(d, Event(type="run_started"))
    first = d.events.flusher
    assert first is not None
    async with d.events.lock:  # the flush is storing (holds the lock) when the next event comes
        await asyncio.sleep(0.03)
        writer.event(d, Event(type="session"))
        assert d.events.flusher is first  # the storing flush looks again when done
    want = ["submitted", "run_started", "session"]
    assert await eventually(lambda: _types(store, "j1"), want) == want
    await writer.close(d)


async def test_a_write_between_attempts_stores_the_waiting_events(store: _CountingStore) -> None:
    """The session planner reads the last attempt's `session` event from Redis before the next attempt."""
    d = await _delivery(store)
    writer = FencedWriter(store, 30, linger_s=0.01, idle_linger_s=60)
    writer.event(d, Event(type="session", data={"session_id": "s-1"}))
    assert await writer.write(d, session_id="s-1")  # a retry's write: no hold
    assert _types(store, "j1") == ["submitted", "session"]
    await writer.close(d)


async def test_a_first_delivery_reads_no_stream_at_its_end_unless_its_events_went_to_one(
    store: _CountingStore,
) -> None:
    # A job's first delivery starts knowing it has no stream: its terminal write skips reading one. Events flushed
    # mid-run, or stored by a write before the end, create one: the terminal write must still fold them in.
    quiet = await _delivery(store, "quiet")
    quiet.events.stream = False
    writer = FencedWriter(store, 30, linger_s=60)
    writer.event(quiet, Event(type="claimed"))
    assert await writer.write(quiet, "succeeded", Event(type="succeeded"))
    assert not quiet.events.stream and _types(store, "quiet") == ["submitted", "claimed", "succeeded"]

    flushed = await _delivery(store, "flushed")
    flushed.events.stream = False
    fast = FencedWriter(store, 30, linger_s=0.01)
    fast.event(flushed, Event(type="run_started"))
    assert flushed.events.flusher is not None
    await flushed.events.flusher  # an append: the stream exists now
    assert await fast.write(flushed, "succeeded", Event(type="succeeded"))
    assert _types(store, "flushed") == ["submitted", "run_started", "succeeded"]
    assert not store.redis.exists(store.keys.events("flushed"))  # folded into the record, the stream deleted

    written = await _delivery(store, "written")
    written.events.stream = False
    writer.event(written, Event(type="claimed"))
    assert await writer.write(written, account="a")  # an attempt write stores what waits: to the stream
    assert await writer.write(written, "succeeded", Event(type="succeeded"))
    assert _types(store, "written") == ["submitted", "claimed", "succeeded"]
    assert not store.redis.exists(store.keys.events("written"))
