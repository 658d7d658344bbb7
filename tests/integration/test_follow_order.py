"""The order of reads of claudeq/follow.py's loop, on real Redis: the job's terminal write made between any two of a
follower's reads (the final events written between reading the events and reading the status among them) is never
missed, nor is any event seen twice — where a loop reading the events first and the status second misses it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from claudeq.follow import Ended, blocking, follow
from claudeq.jobs import JobStore
from claudeq.models import TERMINAL, Event, JobStatus
from claudeq.producer.client import Client
from claudeq.script_calls import PipeCall, run_call
from claudeq.worker.store.job_store import JobWrite, make_worker_store
from tests.support.aio import run

EXPECTED = ["submitted", "claimed", "run_started", "assistant_text", "result", "succeeded"]


class Interleaved:
    """The producer's store, with the job's terminal write made right after the `nth` call of its read `what`."""

    def __init__(self, store: JobStore, finish: Callable[[], None], what: str, nth: int) -> None:
        self.store = store
        self.finish = finish
        self.what = what
        self.nth = nth
        self.calls: Counter[str] = Counter()

    def _done(self, name: str) -> None:
        self.calls[name] += 1
        if (name, self.calls[name]) == (self.what, self.nth):
            self.finish()

    def announce_follow(self, job_id: str, now: float | None = None) -> None:
        self.store.announce_follow(job_id, now)
        self._done("announce_follow")

    def status_call(self, job_id: str) -> PipeCall[JobStatus | None]:
        call = self.store.status_call(job_id)

        def parse(replies: list[Any]) -> JobStatus | None:
            status = call.parse(replies)
            self._done("status")
            return status

        return dataclasses.replace(call, parse=parse)

    def read_events(
        self, job_id: str, after: str = "0-0", block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, Event]]:
        events = self.store.read_events(job_id, after, block_ms, count)
        self._done("read_events")
        return events


def _running_job(client: Client, redis_client: redis.Redis) -> tuple[str, Callable[[], None]]:
    """A running job with two events in its stream, and its terminal write (two more events and `succeeded`)."""
    worker = make_worker_store(client.settings, redis_client)
    job_id = client.submit(prompt="followed").id
    claim = run(worker.send(worker.claim_call(job_id, "w1", 30)))
    assert run(worker.send(worker.append_call(job_id, claim.fence, [Event(type="claimed"), Event(type="run_started")])))

    def finish() -> None:
        tail = [Event(type="assistant_text", data={"text": "done"}), Event(type="result")]
        assert run(
            worker.send(
                worker.write_call(JobWrite(job_id, claim.fence, "succeeded", events=[*tail, Event(type="succeeded")]))
            )
        )

    return job_id, finish


async def _events_then_status(store: Interleaved, job_id: str) -> list[str]:
    """A follower reading the events first and the status second (how MCP's wait_job once read)."""
    after, seen = "0-0", []
    while True:
        for entry_id, event in await asyncio.to_thread(store.read_events, job_id, after):
            after = entry_id
            seen.append(event.type)
        status = await asyncio.to_thread(run_call, store.status_call(job_id))
        if status is None or status in TERMINAL:
            return seen
        await asyncio.sleep(0.01)


def test_the_end_written_between_reading_the_events_and_the_status_is_missed_by_the_other_order(
    client: Client, redis_client: redis.Redis
) -> None:
    job_id, finish = _running_job(client, redis_client)
    store = Interleaved(client.store, finish, "read_events", 1)
    assert asyncio.run(_events_then_status(store, job_id)) == ["submitted", "claimed", "run_started"]  # no end


@pytest.mark.parametrize(
    ("what", "nth"),
    [("announce_follow", 1), ("status", 1), ("read_events", 1), ("status", 2), ("read_events", 2)],
)
def test_the_end_written_between_any_two_reads_is_followed_once(
    client: Client, redis_client: redis.Redis, what: str, nth: int
) -> None:
    job_id, finish = _running_job(client, redis_client)
    store = Interleaved(client.store, finish, what, nth)
    items = list(blocking(follow(store, job_id, poll_s=0.01)))
    assert store.calls[what] >= nth  # the terminal write was made where asked
    assert [i[1].type for i in items if isinstance(i, tuple)] == EXPECTED
    assert items[-1] == Ended("succeeded")
    assert [e.type for e in client.events(job_id, follow=True)] == EXPECTED  # the client's follow: the same loop
