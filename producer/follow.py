"""Following a job's events live, for the front ends on an event loop (the HTTP API's event stream; `claudeq web`'s
live page reads in the same order): one generator, one order of reads, and the front ends only format what it yields.

Each pass announces the follower (the worker running the job then stores its events within 0.1 s), reads the status
and then the events after the last one seen. The terminal write moves the last events into the record in the same
step, so once a status read is terminal the events read after it hold them all: the stream ends with `Ended` only
when nothing can come after. The blocking reads run in threads (the producer's Redis client is synchronous).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from claudeq.jobs import JobStore
from claudeq.models import TERMINAL, Event
from claudeq.script_calls import run_call

#: How often a pass looks for new events (s), and at least how often a quiet stream yields `KeepAlive` (s).
POLL_S = 0.25
KEEPALIVE_S = 15.0


@dataclass(frozen=True)
class Ended:
    """The job ended with `status` (`gone`: its record no longer exists)."""

    status: str


@dataclass(frozen=True)
class KeepAlive:
    """Nothing new for a while: a front end says so to keep its connection open."""


async def follow(
    store: JobStore, job_id: str, after: str = "0-0", poll_s: float = POLL_S, keepalive_s: float = KEEPALIVE_S
) -> AsyncIterator[tuple[str, Event] | KeepAlive | Ended]:
    """(entry id, event) for each event after entry `after` as it comes, `KeepAlive` when quiet, `Ended` last."""
    quiet = 0.0
    while True:
        await asyncio.to_thread(store.announce_follow, job_id)
        status = await asyncio.to_thread(run_call, store.status_call(job_id))
        batch = await asyncio.to_thread(store.read_events, job_id, after)
        for entry_id, event in batch:
            after = entry_id
            yield entry_id, event
            quiet = 0.0
        if status is None or status in TERMINAL:
            yield Ended(status or "gone")
            return
        if quiet >= keepalive_s:
            yield KeepAlive()
            quiet = 0.0
        await asyncio.sleep(poll_s)
        quiet += poll_s
