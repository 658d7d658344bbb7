"""One delivery of a job in this process, and the typed answers the engine gives about it."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from claudeq.models import FREE_OUTCOMES, Attempt, Event, JobRecord, JobResult, PendingApproval, Usage
from claudeq.tracing import NO_SPAN, SpanLike

from ..accounts.manager import SlotLease, Spent
from ..store.job_store import ClaimResult

#: Why a delivery's `cancel` event was set: a producer's cancel, the worker's shutdown, or the lease was lost.
StopWhy = Literal["cancel", "shutdown", "lost"]

#: How the handling of a delivery ended: the job's new status, `lost` (another worker owns the job now: nothing was
#: written), `handed_back` (shutting down: re-sent unclaimed) or `dropped` (nothing to do; see `Delivered.reason`).
DeliveryOutcome = Literal["succeeded", "failed", "cancelled", "deferred", "requeued", "lost", "handed_back", "dropped"]
#: The outcomes the attempt loop ends with (a subset of DeliveryOutcome).
Finish = Literal["succeeded", "failed", "cancelled", "deferred", "requeued", "lost"]
#: Why a delivery was dropped: what the claim found, `redis` (unreachable; the reconciler re-sends), `malformed`
#: (not a job id) or `error` (the worker failed inside; the reconciler recovers the job).
DropReason = ClaimResult | Literal["redis", "malformed", "error"]


@dataclass(frozen=True)
class Delivered:
    """What became of one delivery; `str()` is the label the Celery task returns and logs
    (`succeeded`, `dropped:busy`, ...)."""

    outcome: DeliveryOutcome
    reason: DropReason | None = None

    def __str__(self) -> str:
        return f"{self.outcome}:{self.reason}" if self.reason else self.outcome

    @staticmethod
    def dropped(reason: DropReason) -> Delivered:
        """A delivery there was nothing to do for."""
        return Delivered("dropped", reason)


class ScheduledFlush:
    """One flush of a delivery's pending events set for `at` (the loop's clock): a loop timer until it is due, then
    (only if events wait) the task that stores them. FencedWriter (delivery/fenced.py) makes and runs it; a run's
    flushes mostly never come due (its status writes take the events first), and a timer costs the loop a fraction
    of a task that sleeps (docs/scaling.md#the-engines-redis-client). Awaiting it waits for the flush to end."""

    __slots__ = ("at", "ended", "task", "timer")

    def __init__(self, at: float) -> None:
        self.at = at
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        #: Came due with nothing to store, or cancelled before it came due.
        self.ended = False

    def done(self) -> bool:
        """Whether it has ended: came due with nothing to store, stored, or was cancelled."""
        task = self.task
        return task.done() if task is not None else self.ended

    def cancelled(self) -> bool:
        """Whether `cancel` stopped it (before it came due, or while it stored)."""
        if self.task is not None:
            return self.task.cancelled()
        return self.timer is not None and self.timer.cancelled()

    def cancel(self) -> None:
        """Stop it: its timer if not due yet, else its storing task."""
        if self.task is not None:
            self.task.cancel()
            return
        if self.timer is not None:
            self.timer.cancel()
        self.ended = True

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        # Polls the clock rather than keep an asyncio.Event per flush: only a test awaits a flush.
        while self.task is None and not self.ended:  # noqa: ASYNC110
            await asyncio.sleep(max(0.0, self.at - loop.time()))
        if self.task is not None:
            await self.task


@dataclass
class EventBuffer:
    """A delivery's events on their way to Redis. Only FencedWriter (delivery/fenced.py) reads and writes it."""

    #: Whether the job may have an event stream (False: none of its events went to one yet, so its terminal write
    #: need not read it). A job's first delivery starts with none; any other may find its earlier deliveries' events.
    stream: bool = True
    #: Whether the delivery's terminal write brought the compacted events packed (no stream to read: FencedWriter
    #: packed them), so nothing is left to pack after it.
    packed: bool = False
    #: Events emitted but not stored yet: the next fenced write takes them, or a flush shortly after.
    pending: list[Event] = field(default_factory=list)
    #: Serialises the delivery's appends and writes, so its events reach Redis in the order they were emitted.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    flusher: ScheduledFlush | None = None  # the pending flush of `pending`, if one is scheduled
    flush_at: float = 0.0  # when `flusher` stores the pending events (the loop's clock: loop.time())
    #: Flushes set for later than a follower needs, left to run beside the sooner one (FencedWriter._schedule).
    later_flushers: set[ScheduledFlush] = field(default_factory=set)
    #: Someone follows the job's events until then (time.monotonic()): its events are stored within 0.1 s.
    followed_until: float = 0.0


@dataclass
class Lease:
    """Whose run the job is and until when surely: the claim's fence (every fenced write checks it) and the
    monotonic time before which the lease (and the account slot) cannot have expired: the send time of the claim,
    then of the last heartbeat that renewed both, plus the lease TTL. The engine sets it at the claim; then only
    LeaseKeeper (delivery/lease.py) moves `until`, which its guard watches."""

    fence: int
    until: float = 0.0


@dataclass
class SlotHold:
    """The account slot a delivery holds and what its release settles. The handler's (delivery/handler.py): it
    takes the slot, records the attempt's spend and hands both to the terminal write or to Dispatch.release; the
    engine fills `may_hold` and `indexed` from the claim."""

    slot: SlotLease | None = None  # the account slot held right now
    #: The last attempt's cost, not counted yet: the terminal write counts it when it can, else the handler does.
    spent: Spent | None = None
    #: Where the job may hold an account slot as the delivery starts, as the claim read it: the slots key the waiting
    #: line handed it (`slot`), the account its last attempt ran on. None: not known (every account is looked at).
    may_hold: frozenset[str] | None = None
    #: Whether the job sits in its tenant's active-job index (its record's `indexed`; True when not known): its end
    #: takes it out.
    indexed: bool = True
    rank: float | None = None  # the job's place in the waiting line, once known (claudeq.worker.accounts.waiting_line)


@dataclass
class Delivery:
    """One delivery of a job being handled by this process: the job as claimed and its run so far, and three parts
    with one owner each: the lease (LeaseKeeper), the event buffer (FencedWriter) and the slot hold (the handler)."""

    job_id: str
    lease: Lease
    record: JobRecord
    attempts: list[Attempt]
    cancel: asyncio.Event = field(default_factory=asyncio.Event)  # stops the run / cuts a wait short
    why: StopWhy | None = None  # why `cancel` was set
    urgent: asyncio.Event = field(default_factory=asyncio.Event)  # set with why=lost: kill the run at once
    result: JobResult = field(default_factory=JobResult)  # latest (maybe partial) output
    session_id: str | None = None
    first_claim: bool = False  # the job's first claim ever (its queue wait ends here)
    #: The claim already said whether a cancel flag was set: the first attempt need not ask Redis again.
    cancel_known: bool = False
    #: The delivery's events on their way to Redis (FencedWriter's alone).
    events: EventBuffer = field(default_factory=EventBuffer)
    #: The account slot it holds and what its release settles (the handler's).
    hold: SlotHold = field(default_factory=SlotHold)
    #: The delivery's span when the job is traced (docs/tracing.md); its attempts' spans are its children.
    trace: SpanLike = NO_SPAN
    #: A parked job's request with the decision its next run delivers (docs/jobs.md#tool-approval): recorded as
    #: delivered only when that run starts, so a deferral for want of a slot in between loses nothing.
    unparked: PendingApproval | None = None

    @property
    def counted(self) -> int:
        """Attempts so far that count against max attempts."""
        return sum(1 for a in self.attempts if a.outcome is not None and a.outcome not in FREE_OUTCOMES)

    @property
    def lost(self) -> bool:
        """Whether another worker may own the job now (this one must write nothing more)."""
        return self.why == "lost"

    def stop(self, why: StopWhy) -> None:
        """Stop the run (or cut a wait short); the first reason given is the one acted on."""
        if self.why is None:
            self.why = why
        self.cancel.set()

    def lose(self) -> None:
        """The job is (or is about to be) no longer ours: stop the run at once, write nothing, free nothing."""
        self.stop("lost")
        self.why = "lost"
        self.urgent.set()


def summed_usage(attempts: list[Attempt]) -> Usage:
    """The usage of all attempts together (the record's result.usage)."""
    total = Usage()
    for attempt in attempts:
        if attempt.usage is not None:
            total = total + attempt.usage
    return total
