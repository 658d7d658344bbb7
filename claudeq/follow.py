"""Following a job's events as they come: the one loop every front end uses (`Client.events(follow=True)` and so
`claudeq events --follow`, `AsyncClient.events`, `claudeq web`'s live page, MCP `wait_job`, the HTTP API's event
stream). The front ends only format what it yields (docs/architecture.md#following-a-jobs-events).

Each pass announces the follower (the worker running the job then stores its events within 0.1 s), reads the status
and then the events after the last one seen. The terminal write sets the status and moves the run's last events into
the record in one step, so once a status read is terminal the events read after it hold them all: the loop ends with
`Ended` only when nothing can come after. (Events first and the status second misses the final events when the job
finishes between the two reads.) A full page of events is followed by the next page at once, so a finished job's
events are all read before `Ended`, however many. The cursor is an event's entry id: a follower resumes after the
last one it saw (SSE's Last-Event-ID) and sees none twice.

The core is async (the store's reads block, so they run in threads); `blocking` drives it for synchronous callers.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from claudeq.models import TERMINAL, Event, JobStatus
from claudeq.script_calls import PipeCall, run_call

#: How often a pass looks for new events (s), and at least how often a quiet stream yields `KeepAlive` (s).
POLL_S = 0.25
KEEPALIVE_S = 15.0
#: The most events one read asks for; a full page is followed by the next one without waiting.
PAGE = 500

T = TypeVar("T")


class FollowedStore(Protocol):
    """The reads following takes from a store (claudeq/jobs/_store.py `JobStore`)."""

    def announce_follow(self, job_id: str, now: float | None = None) -> None: ...

    def status_call(self, job_id: str) -> PipeCall[JobStatus | None]: ...

    def read_events(
        self, job_id: str, after: str = "0-0", block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, Event]]: ...


@dataclass(frozen=True)
class Ended:
    """The job ended with `status` (`gone`: its record no longer exists)."""

    status: str


@dataclass(frozen=True)
class KeepAlive:
    """Nothing new for `keepalive_s`: a front end says so to keep its connection open. `status`: the job's, as read."""

    status: str


#: What `follow` yields: (entry id, event) for each event, `KeepAlive` when quiet, `Ended` last.
Followed = tuple[str, Event] | KeepAlive | Ended


async def follow(
    store: FollowedStore,
    job_id: str,
    after: str = "0-0",
    *,
    poll_s: float = POLL_S,
    keepalive_s: float | None = KEEPALIVE_S,
    until: float | None = None,
) -> AsyncIterator[Followed]:
    """(entry id, event) for each event after entry `after` as it comes, `KeepAlive` after `keepalive_s` quiet
    seconds (None: never), `Ended` last. `until` (a `time.monotonic()` instant): stop there without `Ended` when the
    job has not ended by then (after one more pass)."""
    quiet_since = time.monotonic()
    while True:
        await asyncio.to_thread(store.announce_follow, job_id)
        status = await asyncio.to_thread(run_call, store.status_call(job_id))
        while True:
            batch = await asyncio.to_thread(functools.partial(store.read_events, job_id, after, count=PAGE))
            for entry_id, event in batch:
                after = entry_id
                yield entry_id, event
            if batch:
                quiet_since = time.monotonic()
            if len(batch) < PAGE:
                break
        if status is None or status in TERMINAL:
            yield Ended(status or "gone")
            return
        now = time.monotonic()
        if until is not None and now >= until:
            return
        if keepalive_s is not None and now - quiet_since >= keepalive_s:
            yield KeepAlive(status)
            quiet_since = now
        await asyncio.sleep(poll_s if until is None else min(poll_s, until - now))


def blocking(items: AsyncIterator[T]) -> Iterator[T]:
    """Drive an async iterator from synchronous code: its steps run on a private event loop in a thread of its own
    (so this works whether or not the calling thread runs a loop). Closing the iterator, or an exception in the
    caller while it waits (Ctrl-C), cancels the step under way and closes `items`."""
    with _Loop() as loop:
        try:
            while True:
                try:
                    item = loop.run(_next(items))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            loop.run(_close(items))


class _Loop:
    """An event loop running in a thread of its own while the block lasts."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="claudeq-follow", daemon=True)

    def __enter__(self) -> _Loop:
        self.thread.start()
        return self

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """`call`'s result, run on the loop; cancelled there when waiting for it is interrupted."""
        future = asyncio.run_coroutine_threadsafe(call, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self.loop.shutdown_default_executor())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


async def _next(items: AsyncIterator[T]) -> T:
    return await anext(items)


async def _close(items: AsyncIterator[T]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()
