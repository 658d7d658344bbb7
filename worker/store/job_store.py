"""WorkerJobStore: what only workers do with job state — claim, heartbeat, fenced writes, promote, recover, re-send,
the outbox, the archive's moves, the worker index.

The producer's part (create, read, cancel, events) is `claudeq.jobs.JobStore`; this class adds the worker's side
on the same Redis. Every status change is one atomic Lua script (claudeq/worker/store/worker_job_scripts.py).

What the worker does here is, once each, a call a run sends (`claim_call`, `beat_call`, `write_call`,
`finish_call`, `append_call`, `start_call`: `await store.send(call)`) or a coroutine for the engine's event loop (the
producer's reads too, as `reads`: claudeq/worker/store/reads.py): on the async client a worker attaches
(`use_async`), with no thread hop per call; without one (fakeredis) on the sync client in a thread
(claudeq.script_calls, docs/scaling.md#the-engines-redis-client). Only `archive_job` is sync: the archive's database
client is.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import redis

from claudeq.accounts import HISTORY_TTL_S, AcquireArgs, AdmitArgs
from claudeq.archive import RESULT_KEPT_CHARS
from claudeq.broker import list_for, run_message, sent_at_of
from claudeq.events import ended, session_of
from claudeq.jobs import (
    ARCHIVED_FIELD,
    CANCEL_FIELD,
    WEBHOOK_CURSOR_FIELD,
    JobFields,
    JobStore,
    compact_json,
    encode_event,
    encode_fields,
    pack_events,
    stored_time,
)
from claudeq.keys import Keys, text
from claudeq.lua.results import Slot, Write
from claudeq.models import TERMINAL, Attempt, Event, JobError, JobStatus, PlannedSession, utcnow
from claudeq.script_calls import AsyncCalls, ScriptCall
from claudeq.tenants import SettleArgs

from ...config.settings import Settings
from . import worker_job_scripts as scripts
from .reads import LoopReads

#: What a claim found: `ok` (ours now), or why the delivery is dropped (`busy`: a live lease elsewhere; `orphan`:
#: running without a lease, the reconciler's; `missing`; or the job's status when it is not queued).
ClaimResult = Literal[
    "ok", "busy", "orphan", "missing", "waiting", "queued", "deferred", "succeeded", "failed", "cancelled"
]


@dataclass(frozen=True)
class Beat:
    """The answer to a heartbeat."""

    ours: bool  # the lease was extended (False: the job was recovered or taken over; nothing was touched)
    held: bool = True  # the run's account slot still held it (its expiry moved); True when none was given
    cancelled: bool = False  # a cancel flag is set


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: `ok` with a fencing token, or why the delivery is to be dropped."""

    result: ClaimResult
    fence: int = 0
    first: bool = False  # the job's first claim ever: its queue wait ends now
    #: The job hash as the claim left it (status, fence, worker, started_at set): the record, without a second read.
    fields: dict[str, str] | None = None
    #: Whether a cancel flag was set when the job was claimed (None: this claim did not say).
    cancelled: bool | None = None

    @property
    def ok(self) -> bool:
        """Whether this worker now owns the run."""
        return self.result == "ok"


@dataclass(frozen=True)
class LeaseState:
    """A job's lease as stored (`WorkerJobStore.lease_state`)."""

    fence: int | None  # its fencing token (None: never claimed, or no record)
    status: str | None  # None: no record
    cancel_requested: bool  # a cancel flag is set


@dataclass(frozen=True)
class SlotRelease:
    """What a job's terminal write frees in the same script (FINISH): the run's account slot (`keys`: slots, account
    hash, its four lines; `args`: RELEASE's handout arguments), the job's entries in its tenants' active-job index
    (`unindex`; none for a job never indexed), and what its last attempt spent (`settle`: the keys and arguments of
    the `settle` Lua function, claudeq/lua/lib/settle.lua; None: nothing to count)."""

    handout: AdmitArgs
    unindex: list[str]
    settle: SettleArgs | None = None


@dataclass(frozen=True)
class JobWrite:
    """One fenced write of a job's record, built once by its caller and sent as a `write_call` (or, terminal, a
    `finish_call`): only while `fence` still holds the job, set `fields`, move to `status` (None: no move) and append
    `events` in order. `stream` False: the job has no event stream (none of its events ever went to one), so a
    terminal write need not read it. `pack`: such a write stores the compacted events packed
    (`claudeq.jobs.pack_events`, computed by the store: the script has no codec) instead of as JSON, so nothing is
    left to pack after it."""

    job_id: str
    fence: int
    status: JobStatus | None = None
    fields: JobFields = field(default_factory=lambda: JobFields())
    events: Sequence[Event] = ()
    stream: bool = True
    pack: bool = False


@dataclass(frozen=True)
class Freed:
    """FINISH's answer: whether the write landed and freed what its SlotRelease names (`done`: the fence held; a
    write that did not land freed and counted nothing), and the waiters the slot was handed to (`admitted`: now
    queued, the caller sends their messages)."""

    done: bool
    admitted: tuple[str, ...] = ()


#: A write's answer: True (written), False (stale: nothing written), or CANCELLED: a write to `queued` or `deferred`
#: found the cancel flag set and ended the job `cancelled` instead (its terminal bookkeeping is the caller's).
CANCELLED: Literal["cancelled"] = "cancelled"
Written = bool | Literal["cancelled"]
#: The error and the event of a job a status write ended `cancelled` because of its cancel flag.
CANCEL_ERROR = JobError(kind="cancelled", message="cancelled by request")
#: The event a write to `queued` / `deferred` brings for its status: dropped when the write cancels the job instead.
_STATUS_EVENT = {"queued": "requeued", "deferred": "deferred"}

#: The compacted events' JSON as `json.dumps(entries, separators=(",", ":"), ensure_ascii=False)` writes it, with its
#: encoder made once (json.dumps makes one per call given any option).
_ENTRIES_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

#: Send times come from different hosts' clocks: a head message up to this much younger still counts as maybe older.
CLOCK_SLACK_S = 1.0
#: START's answer when the slot was taken but the run's fence no longer holds the job.
START_LOST = Slot.START_LOST
#: Expired leases the reconciler reads per pass (it recovers each; more wait for the next pass).
EXPIRED_READ = 500


@dataclass(frozen=True)
class AttemptStart:
    """An attempt about to start: what its start writes in the record (its account, the attempts, the job's first
    session plan), given the account and the budget the slot came with. Built by `WorkerJobStore.attempt_start`;
    the account manager writes it in the script that takes the slot (`call`), the handler apart when it could not."""

    store: WorkerJobStore
    job_id: str
    fence: int
    number: int
    worker: str
    before: tuple[Attempt, ...]
    spec_budget: float | None  # the spec's own budget: an attempt keeps its budget only when it is not that one
    session_plan: PlannedSession | None = None  # the first plan, written with the job's first attempt

    def on(self, account: str, budget: float | None) -> Attempt:
        """The attempt, starting now on `account` with `budget` to spend there."""
        return Attempt(
            number=self.number,
            account=account,
            worker=self.worker,
            started_at=utcnow(),
            budget_usd=budget if budget != self.spec_budget else None,
        )

    def fields(self, attempt: Attempt) -> JobFields:
        """The record fields the start of `attempt` writes."""
        fields: JobFields = {"account": attempt.account, "attempts": [*self.before, attempt]}
        if self.session_plan is not None:
            fields["session_plan"] = self.session_plan
        return fields

    def call(self, acquire: ScriptCall[int], attempt: Attempt) -> ScriptCall[int]:
        """`acquire` with the start of `attempt` written in the same script (START: `WorkerJobStore.start_call`)."""
        return self.store.start_call(acquire, self, attempt)


class WorkerJobStore(AsyncCalls, JobStore):
    """JobStore plus the transitions only workers make."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        result_ttl_s: int,
        events_maxlen: int,
        conversation_ttl_s: int | None = None,
    ) -> None:
        super().__init__(
            client,
            keys,
            result_ttl_s=result_ttl_s,
            events_maxlen=events_maxlen,
            conversation_ttl_s=conversation_ttl_s,
        )
        self._claim = client.register_script(scripts.CLAIM)
        self._heartbeat = client.register_script(scripts.HEARTBEAT)
        self._write = client.register_script(scripts.WRITE)
        self._finish = client.register_script(scripts.FINISH)
        self._promote = client.register_script(scripts.PROMOTE)
        self._recover = client.register_script(scripts.RECOVER)
        self._resend = client.register_script(scripts.RESEND)
        self._append = client.register_script(scripts.APPEND)
        self._upgrade_running = client.register_script(scripts.UPGRADE_RUNNING)
        self._start = client.register_script(scripts.START)
        self._pack_events = client.register_script(scripts.PACK_EVENTS)
        self._take_notifications = client.register_script(scripts.CLAIM_NOTIFICATIONS)
        self._link = client.register_script(scripts.LINK)
        self._settle_notifications = client.register_script(scripts.SETTLE_NOTIFICATIONS)
        self._trim_offset = 0  # where the next trim_index resumes among the entries older than the retention
        #: The reads of job state (record, status, events) as coroutines for the worker's event loop.
        self.reads = LoopReads(self)

    # ---- the engine loop's client (use_async: claudeq.script_calls.AsyncCalls) ---------------------------------

    async def aclose(self) -> None:
        """Close the async client's connections (the engine loop ends)."""
        if self._async is not None:
            await self._async.aclose(close_connection_pool=True)

    # ---- the run's side: claim, heartbeat, fenced writes -------------------------------------------------------

    def claim_call(self, job_id: str, worker: str, lease_ttl_s: float) -> ScriptCall[Claim]:
        """Atomically take a queued job: status running, a lease with a new fencing token (and the record read in
        the same step: `Claim.fields`)."""
        now = stored_time(utcnow())

        def parse(reply: Any) -> Claim:
            result, fence = cast(ClaimResult, text(reply[0])), int(reply[1])
            if result != "ok":
                return Claim(result, fence)
            first = int(reply[2]) == 1
            flat = [text(v) for v in reply[3]]
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            fields.update(status="running", fence=str(fence), worker=worker)
            if first:
                fields["started_at"] = now
            return Claim(result, fence, first, fields, bool(int(reply[4])) if len(reply) > 4 else None)

        clock = time.time()
        return scripts.ClaimArgs(
            job=self.keys.job(job_id),
            queued=self.keys.queued,
            running=self.keys.running,
            job_id=job_id,
            worker=worker,
            lease_expiry=repr(clock + lease_ttl_s),
            now_iso=now,
            now_s=repr(clock),
        ).call(self._claim, parse)

    def beat_call(
        self, job_id: str, worker: str, fence: int, lease_ttl_s: float, expiring: Sequence[str] = ()
    ) -> ScriptCall[Beat]:
        """One heartbeat of a run, in one script: extend the lease (`Beat.ours` False: the job was recovered or
        taken over) and, while it is ours, move the run's expiry in each sorted set of `expiring` (its account slot
        first, then its tenant's runs: `expiring_keys`), and say whether a cancel flag is set."""

        def parse(reply: Any) -> Beat:
            ours, held, cancelled = reply
            return Beat(bool(ours), bool(held), bool(cancelled))

        return scripts.HeartbeatArgs(
            job=self.keys.job(job_id),
            running=self.keys.running,
            holders=tuple(expiring),
            fence=fence,
            job_id=job_id,
            expiry_s=repr(time.time() + lease_ttl_s),
            worker=worker,
        ).call(self._heartbeat, parse)

    def finish_call(self, job_write: JobWrite, release: SlotRelease) -> ScriptCall[Freed]:
        """A terminal `write_call` that also frees what `release` names (the run's slot, the job's index entries, its
        last attempt's spend), in one script, only while the write's fence still holds the job."""
        if job_write.status not in TERMINAL:
            raise ValueError("finish writes a terminal status")
        write = self._write_args(job_write)

        def parse(reply: list[Any]) -> Freed:
            return Freed(bool(int(reply[0])), tuple(text(job) for job in reply[1:]))

        nothing = SettleArgs(
            spend_pairs=[],
            job_id="",
            cost="",
            hour_field="",
            tenant_turn="",
            account_turn="",
            sample="",
            ttl_s="",
            drop="",
        )
        settle = release.settle if release.settle is not None else nothing
        handout = release.handout
        return scripts.FinishArgs(
            write_keys=write,
            slots=handout.slots,
            account=handout.account,
            lines=handout.lines,
            spend_pairs=settle.spend_pairs,
            unindex=release.unindex,
            job_key_prefix=handout.job_key_prefix,
            now_s=handout.now_s,
            max_concurrency=handout.max_concurrency,
            expiry_s=handout.expiry_s,
            predictive=handout.predictive,
            ramp_rate=handout.ramp_rate,
            jitter_s=handout.jitter_s,
            n_spend=len(settle.spend_pairs),
            settle=settle,
            write=write,
        ).call(self._finish, parse)

    def attempt_start(
        self,
        job_id: str,
        fence: int,
        number: int,
        worker: str,
        before: Sequence[Attempt],
        spec_budget: float | None,
        session_plan: PlannedSession | None = None,
    ) -> AttemptStart:
        """Attempt `number` of a delivery (under `fence`, after the attempts `before`), to be written with the account
        slot it takes (AccountManager.acquire: `start_call`), or apart once it has one."""
        return AttemptStart(self, job_id, fence, number, worker, tuple(before), spec_budget, session_plan)

    def start_call(self, acquire: ScriptCall[int], start: AttemptStart, attempt: Attempt) -> ScriptCall[int]:
        """`acquire` (an account slot's ACQUIRE call, AccountStore) with `attempt`'s start written in the same
        script, under the start's fence (START): ACQUIRE's answer, or START_LOST when the slot was taken but the
        fence no longer holds the job (nothing written)."""
        assert isinstance(acquire.named, AcquireArgs), "START takes an ACQUIRE call built from its AcquireArgs"
        write = self._write_args(JobWrite(start.job_id, start.fence, fields=start.fields(attempt)))
        return scripts.StartArgs(acquire=acquire.named, write=write).call(self._start, int)

    def write_call(self, job_write: JobWrite) -> ScriptCall[Written]:
        """The write (`JobWrite`), in one script, only while its fence still holds the job. False = stale: nothing
        written, no event. CANCELLED: a write to `queued` or `deferred` found the job's cancel flag set and ended it
        `cancelled` instead (a cancel is seen at every status write)."""
        return self._write_args(job_write).call(self._write, _written)

    def _write_args(self, job_write: JobWrite) -> scripts.WriteArgs:
        job_id, status, every = job_write.job_id, job_write.status, tuple(job_write.events)
        fields = job_write.fields.copy()  # the write's own: a terminal write adds finished_at
        if status == "deferred" and "ready_at" not in fields:
            raise ValueError("a deferred job needs ready_at")
        if status in TERMINAL and "finished_at" not in fields:
            fields["finished_at"] = utcnow()
        score = time.time() if status == "queued" else 0.0
        if status == "deferred":
            score = fields["ready_at"].timestamp()
        payloads = [encode_event(e) for e in every]
        on_cancel = ""
        if status in _STATUS_EVENT:
            own = 1 if every and every[-1].type == _STATUS_EVENT[status] else 0
            attempt = every[-1].attempt if own else None
            cancelled = ended("cancelled", CANCEL_ERROR, attempt)
            on_cancel = json.dumps([encode_event(cancelled), compact_json(CANCEL_ERROR), stored_time(utcnow()), own])
        now_ms = int(time.time() * 1000)
        flat: list[str | bytes] = [*encode_fields(fields)]
        if job_write.pack and status in TERMINAL and not job_write.stream and payloads:
            # What lib/pack_events.lua would make of them (no stream: ids from now_ms), packed: one field set by the
            # write instead of a read and a PACK_EVENTS call after it.
            entries = [[f"{now_ms}-{seq}", payload] for seq, payload in enumerate(payloads)]
            packed = pack_events(_ENTRIES_JSON.encode(entries).encode())
            if packed is not None:
                flat += ["events", packed]
        return scripts.WriteArgs(
            job=self.keys.job(job_id),
            running=self.keys.running,
            queued=self.keys.queued,
            deferred=self.keys.deferred,
            stream=self.keys.events(job_id) if job_write.stream or status not in TERMINAL else "",
            outbox=self.keys.outbox,
            waiting=self.keys.waiting,
            job_id=job_id,
            fence=job_write.fence,
            new_status=status or "",
            ttl_s=self.result_ttl_s,
            score=score,
            finished_counts_prefix=self.keys.finished_counts_prefix,
            n_events=len(payloads),
            events_maxlen=self.events_maxlen,
            now_ms=now_ms,
            on_cancel=on_cancel,
            events=payloads,
            fields=flat,
        )

    def append_call(self, job_id: str, fence: int, events: Sequence[Event]) -> ScriptCall[str | None]:
        """Append a running job's events, in order, in one script, while `fence` still holds it: the last entry id,
        None (nothing appended) once the run was superseded or the job moved on. Workers append every event of a
        run this way."""
        if not events:
            raise ValueError("no events to append")
        args = scripts.AppendArgs(
            job=self.keys.job(job_id),
            stream=self.keys.events(job_id),
            fence=fence,
            events_maxlen=self.events_maxlen,
            events=[encode_event(e) for e in events],
        )
        return args.call(self._append, lambda entry_id: None if entry_id is None else text(entry_id))

    async def lease_state(self, job_id: str) -> LeaseState:
        """The job's fencing token, status and cancel flag as stored, read in one call."""
        key, fields = self.keys.job(job_id), ["fence", "status", CANCEL_FIELD]
        ((fence, status, cancel),) = await self._pipe(lambda p: p.hmget(key, fields))
        return LeaseState(None if fence is None else int(fence), None if status is None else text(status), bool(cancel))

    async def pack_events(self, job_id: str) -> int:
        """Compress a finished job's compacted events in its record (the status scripts write them as JSON: Redis's
        Lua has no codec). Read back by `read_events` in either form; replaced only if the field is still what was
        read. -> bytes saved (0: nothing to do, already packed, no smaller, or changed meanwhile)."""
        key = self.keys.job(job_id)
        (raw,) = await self._pipe(lambda p: p.hget(key, "events"))
        if not isinstance(raw, bytes) or raw[:1] != b"[":
            return 0
        packed = pack_events(raw)
        if packed is None:
            return 0
        replaced = await self.send(
            scripts.PackEventsArgs(job=key, read=raw, packed=packed).call(self._pack_events, int)
        )
        return len(raw) - len(packed) if replaced else 0

    async def schedule_archive(self, job_id: str, after_s: float, sessions: Iterable[str] = ()) -> list[str]:
        """A job ended: its compacted events and the transcripts of every session its runs reported (their
        `session` events, and `sessions`) move to the archive `after_s` from now (`archive_due`). -> the sessions."""
        found = set(sessions)
        after = "0-0"
        while True:
            batch = await self.reads.events(job_id, after=after, count=500)
            for entry_id, event in batch:
                after = entry_id
                if session := session_of(event):
                    found.add(session)
            if len(batch) < 500:
                break
        due = time.time() + after_s
        members = {f"j:{job_id}": due, **{f"s:{sid}": due for sid in found}}
        await self._pipe(lambda p: p.zadd(self.keys.archive_due, members))
        return sorted(found)

    async def due_archive(self, limit: int = 50, now: float | None = None) -> list[str]:
        """Members of `archive_due` whose time came, each taken by this caller alone (ZREM: never two movers)."""
        now = time.time() if now is None else now
        (rows,) = await self._pipe(lambda p: p.zrangebyscore(self.keys.archive_due, "-inf", now, start=0, num=limit))
        members = [text(m) for m in rows]
        if not members:
            return []
        taken = await self._pipe(lambda p: [p.zrem(self.keys.archive_due, member) for member in members])
        return [m for m, took in zip(members, taken, strict=True) if took]

    async def archive_later(self, member: str, delay_s: float) -> None:
        """Put a member back in `archive_due` (its move failed): tried again in `delay_s`."""
        await self._pipe(lambda p: p.zadd(self.keys.archive_due, {member: time.time() + delay_s}))

    def archive_job(self, job_id: str) -> bool:
        """Move a finished job's history to the archive (with the retention its record has left): its compacted
        events, and its result when longer than RESULT_KEPT_CHARS. The record keeps `archived` instead and reads
        back the same (read_events, get, list_jobs read the archive). False when there is nothing to move (no
        events nor long result, the record gone, or it changed meanwhile: tried again on a later pass). Requires an
        archive. Sync, and called in a thread: the archive's database client is (its write sits inside the record's
        WATCH)."""
        assert self.archive is not None, "archive_job needs a transcript archive"
        key = self.keys.job(job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                events, result, status = pipe.hmget(key, ["events", "result", "status"])
                pttl = int(pipe.pttl(key))
                if text(status) not in TERMINAL or pttl <= 0:
                    return False
                events = events if isinstance(events, bytes) else None
                result = text(result) if result is not None and len(result) > RESULT_KEPT_CHARS else None
                if events is None and result is None:
                    return False
                self.archive.put_job(self.keys.prefix, job_id, events, result, time.time() + pttl / 1000)
                pipe.multi()
                pipe.hdel(key, *(name for name, value in (("events", events), ("result", result)) if value is not None))
                pipe.hset(key, ARCHIVED_FIELD, "1")
                pipe.execute()
                return True
            except redis.WatchError:
                return False

    # ---- background loops: promoter, reconciler ----------------------------------------------------------------

    async def due_deferred(self, now: float | None = None, limit: int = 100) -> list[str]:
        """Deferred job ids whose ready time has come."""
        now = time.time() if now is None else now
        (rows,) = await self._pipe(lambda p: p.zrangebyscore(self.keys.deferred, "-inf", now, start=0, num=limit))
        return [text(i) for i in rows]

    async def promote(self, job_id: str, now: float | None = None, force: bool = False) -> bool:
        """Claim one deferred job back to `queued` (atomic ZREM, so only one caller wins); the caller sends it."""
        due = "+inf" if force else str(time.time() if now is None else now)
        args = scripts.PromoteArgs(
            deferred=self.keys.deferred, job=self.keys.job(job_id), queued=self.keys.queued, job_id=job_id, now_s=due
        )
        return await self.send(args.call(self._promote, bool))

    async def forget_running(self, job_id: str) -> None:
        """Drop a job id from the running index (its record is gone)."""
        await self._pipe(lambda p: p.zrem(self.keys.running, job_id))

    async def loop_failed(self, loop: str, job_id: str, ttl_s: int) -> int:
        """Count one more pass of `loop` that could not handle the job (kept `ttl_s` after the last); -> how many."""
        key = self.keys.loop_failures(loop, job_id)
        count, _ = await self._pipe(lambda p: p.incr(key).expire(key, ttl_s))
        return int(count)

    async def forget_loop_failures(self, loop: str, job_id: str) -> None:
        """Drop the count of `loop`'s failures on the job (the loop ended it)."""
        await self._pipe(lambda p: p.delete(self.keys.loop_failures(loop, job_id)))

    async def drop_from_indexes(self, job_id: str) -> None:
        """Take a job id out of `running`, `queued` and `deferred` (its key holds no job record)."""
        keys = (self.keys.running, self.keys.queued, self.keys.deferred)
        await self._pipe(lambda p: [p.zrem(key, job_id) for key in keys])

    async def status_and_fence(self, job_id: str) -> tuple[str | None, str | None]:
        """The job's status and fencing token as stored (read when the record itself cannot be parsed)."""
        ((status, fence),) = await self._pipe(lambda p: p.hmget(self.keys.job(job_id), "status", "fence"))
        return (None if status is None else text(status)), (None if fence is None else text(fence))

    async def fence_of(self, job_id: str) -> int | None:
        """The job's fencing token read directly (works when the record itself cannot be parsed)."""
        (value,) = await self._pipe(lambda p: p.hget(self.keys.job(job_id), "fence"))
        return None if value is None else int(value)

    async def upgrade_running(self, lease_ttl_s: float) -> int:
        """Turn a `running` set left by an earlier claudeq (a set of ids beside `job:{id}:lease` strings) into the
        sorted set scored by lease expiry, each run with a fresh lease: a run whose worker is gone is recovered one
        lease later. -> how many runs it moved (0: nothing to do). Every worker does it once as it starts."""
        args = scripts.UpgradeRunningArgs(running=self.keys.running, lease_expiry=repr(time.time() + lease_ttl_s))
        return await self.send(args.call(self._upgrade_running, int))

    def running_ids(self) -> list[str]:
        """Ids of jobs marked running."""
        return [text(i) for i in self.redis.zrange(self.keys.running, 0, -1)]

    def lease_alive(self, job_id: str, now: float | None = None) -> bool:
        """Whether the job's run lease is still live (its expiry in `running` is still to come)."""
        expiry = self.redis.zscore(self.keys.running, job_id)
        return expiry is not None and expiry > (time.time() if now is None else now)

    async def expired_runs(self, now: float | None = None, limit: int = EXPIRED_READ) -> list[str]:
        """Running jobs whose lease expired (its worker stopped renewing it), oldest first: one ZRANGEBYSCORE, however
        many runs are in flight (the reconciler reads these only)."""
        cutoff = time.time() if now is None else now
        (rows,) = await self._pipe(
            lambda p: p.zrangebyscore(self.keys.running, "-inf", f"({cutoff}", start=0, num=limit)
        )
        return [text(i) for i in rows]

    async def take_turn(self, key: str, worker: str, turn_s: float) -> bool:
        """Take a turn that lasts `turn_s` (SET NX PX): False while another worker's turn runs."""
        (taken,) = await self._pipe(lambda p: p.set(key, worker, nx=True, px=max(1, int(turn_s * 1000))))
        return bool(taken)

    async def recover(
        self,
        job_id: str,
        fence: int | str,
        attempts: list[Attempt] | None,
        event: Event | None = None,
        error: JobError | None = None,
        new_fence: int | None = None,
    ) -> Written:
        """A running job whose lease expired goes back to `queued` with `attempts` (None: leave them as they are,
        e.g. when the record cannot be parsed) and `event` appended in the same step; with `error`, it fails instead
        (a terminal write: retention, counters). False if anything moved. CANCELLED: its cancel flag was set, so it
        was cancelled instead of re-queued (a terminal write too; its other bookkeeping is the caller's)."""
        fields: dict[str, object] = {} if attempts is None else {"attempts": attempts}
        on_cancel = ""
        if error is not None:
            fields.update(error=error, finished_at=utcnow())
        if new_fence is not None:  # `fence` was unreadable: the failed record gets one that parses
            fields["fence"] = new_fence
        else:
            cancelled = encode_event(ended("cancelled", CANCEL_ERROR))
            on_cancel = json.dumps([cancelled, compact_json(CANCEL_ERROR), stored_time(utcnow())])
        args = scripts.RecoverArgs(
            job=self.keys.job(job_id),
            running=self.keys.running,
            queued=self.keys.queued,
            stream=self.keys.events(job_id),
            outbox=self.keys.outbox,
            deferred=self.keys.deferred,
            waiting=self.keys.waiting,
            job_id=job_id,
            fence=fence,
            now_s=time.time(),
            event_json="" if event is None else encode_event(event),
            events_maxlen=self.events_maxlen,
            new_status="queued" if error is None else "failed",
            ttl_s=self.result_ttl_s,
            finished_counts_prefix=self.keys.finished_counts_prefix,
            on_cancel=on_cancel,
            fields=list(encode_fields(fields)),
        )
        return await self.send(args.call(self._recover, _written))

    async def stale_queued(self, older_than_s: float, limit: int = 100) -> list[str]:
        """Queued job ids whose message was sent more than `older_than_s` ago."""
        cutoff = time.time() - older_than_s
        (rows,) = await self._pipe(lambda p: p.zrangebyscore(self.keys.queued, "-inf", cutoff, start=0, num=limit))
        return [text(i) for i in rows]

    async def claim_resend(self, job_id: str, older_than_s: float) -> bool:
        """Claim the re-send of an unclaimed queued job (once across all workers)."""
        now = time.time()
        args = scripts.ResendArgs(
            queued=self.keys.queued,
            job=self.keys.job(job_id),
            job_id=job_id,
            sent_before_s=now - older_than_s,
            now_s=now,
        )
        return await self.send(args.call(self._resend, bool))

    async def mark_sent(self, job_id: str) -> None:
        """Record that a message for this queued job was just sent."""
        await self._pipe(lambda p: p.zadd(self.keys.queued, {job_id: time.time()}, xx=True))

    async def send_run(self, job_id: str, queue: str, priority: int = 0) -> None:
        """Push the job's `claudeq.run` message onto its broker list (the broker is this Redis:
        claudeq/broker/_message.py, as `claudeq.producer.client.push_run`) and mark it sent, in one round trip."""
        message, broker_list = run_message(job_id, queue, priority), list_for(queue, priority)

        def send(pipe: Any) -> None:
            pipe.lpush(broker_list, message)
            pipe.zadd(self.keys.queued, {job_id: time.time()}, xx=True)

        await self._pipe(send)

    async def sent_scores(self, job_ids: list[str]) -> list[float | None]:
        """Each job's score in the `queued` set: the time its message was last sent (or later), None if absent."""
        scores = await self._pipe(lambda p: [p.zscore(self.keys.queued, job_id) for job_id in job_ids])
        return [None if s is None else float(s) for s in scores]

    async def may_be_waiting(self, jobs: list[tuple[str, str, float]]) -> set[str]:
        """Of `jobs` (id, broker list, time its message was last sent or later), those whose message may still wait
        in the broker. Costs one LINDEX per distinct list, whatever the queue length: a broker list is FIFO, so
        once its oldest message was sent after a job's message, the job's message has left the list (consumed,
        or never pushed). Unsure (a message without claudeq's send time at the head) counts as waiting."""
        names = list(dict.fromkeys(name for _, name, _ in jobs))
        # kombu LPUSHes and BRPOPs: the oldest message is at the right end.
        heads = await self._pipe(lambda p: [p.lindex(name, -1) for name in names])
        oldest: dict[str, float | Literal["empty"] | None] = {}
        for name, raw in zip(names, heads, strict=True):
            oldest[name] = "empty" if raw is None else sent_at_of(raw)
        waiting: set[str] = set()
        for job_id, name, sent in jobs:
            head = oldest[name]
            if head == "empty":
                continue
            if head is None or head <= sent + CLOCK_SLACK_S:
                waiting.add(job_id)
        return waiting

    async def prune_finished_counts(self, now: float | None = None) -> int:
        """Drop the hours that are over from the finished-job counters (the exporter ignores them anyway)."""
        current = int((time.time() if now is None else now) // 3600)
        counters = [self.keys.finished_counts(status) for status in sorted(TERMINAL)]
        hours = await self._pipe(lambda p: [p.hkeys(key) for key in counters])
        old = {key: [h for h in found if int(h) <= current] for key, found in zip(counters, hours, strict=True)}
        if not any(old.values()):
            return 0
        dropped = await self._pipe(lambda p: [p.hdel(key, *gone) for key, gone in old.items() if gone])
        return sum(int(n) for n in dropped)

    async def sample_slots(self, accounts: Sequence[str], now: float | None = None) -> None:
        """Write each account's slots in use into this minute of its history (`Keys.account_history`): two round
        trips a minute, whatever the number of jobs."""
        if not accounts:
            return
        now = time.time() if now is None else now
        counts = await self._pipe(lambda p: [p.zcount(self.keys.account_slots(a), f"({now}", "+inf") for a in accounts])
        minute = int(now // 60)

        def write(p: Any) -> list[Any]:
            sent = []
            for account, n in zip(accounts, counts, strict=True):
                key = self.keys.account_history(account, minute // 60)
                sent += [p.hset(key, f"slots:{minute}", int(n)), p.expire(key, HISTORY_TTL_S)]
            return sent

        await self._pipe(write)

    # ---- the outbox: end notifications (worker/background/notifier.py) ------------------------------------------

    async def take_notifications(self, room: int, lease_s: float) -> list[str]:
        """Up to `room` jobs whose notifications are due, each taken for `lease_s` (claudeq/lua/outbox/claim.lua)."""
        now = time.time()
        args = scripts.ClaimNotificationsArgs(
            outbox=self.keys.outbox, now_s=now, limit=room, lease_until_s=now + lease_s
        )
        return await self.send(args.call(self._take_notifications, _texts))

    async def drop_notifications(self, job_id: str) -> None:
        """Take a job out of the outbox (its record is gone or unreadable: nothing can be told)."""
        await self._pipe(lambda p: p.zrem(self.keys.outbox, job_id))

    async def webhook_cursor(self, job_id: str) -> str:
        """The entry id of the last event the job's webhook was sent ('0-0': none yet)."""
        (raw,) = await self._pipe(lambda p: p.hget(self.keys.job(job_id), WEBHOOK_CURSOR_FIELD))
        return text(raw) if raw else "0-0"

    async def send_callback(self, job_id: str, queue: str, sent_field: str, message: str) -> None:
        """Push a job's Celery callback message onto `queue`, once ever (`sent_field` marks it sent in the record,
        in the same script: claudeq/lua/outbox/link.lua)."""
        args = scripts.LinkArgs(job=self.keys.job(job_id), queue=queue, sent_field=sent_field, message=message)
        await self.send(args.call(self._link, int))

    async def settle_notifications(
        self, job_id: str, notifications: str, next_due: str, dead: bool, cursor: str
    ) -> None:
        """A notifier pass's delivery log (JSON) in the record, the webhook's event `cursor` ('' unchanged), and
        the job's next place in the outbox: due at `next_due` ('' none: out), in the dead letters when `dead`
        (claudeq/lua/outbox/settle.lua)."""
        args = scripts.SettleNotificationsArgs(
            job=self.keys.job(job_id),
            outbox=self.keys.outbox,
            outbox_dead=self.keys.outbox_dead,
            job_id=job_id,
            notifications=notifications,
            next_due_s=next_due,
            dead="1" if dead else "",
            now_s=time.time(),
            cursor=cursor,
        )
        await self.send(args.call(self._settle_notifications, int))

    # ---- the fleet's worker index: `worker:{id}` hashes and the `workers` zset ------------------------------------

    async def record_worker(self, worker_id: str, fields: dict[str, str | int | float], ttl_s: int) -> None:
        """Write a worker's heartbeat hash (expiring after `ttl_s`) and its `workers` entry (score = its heartbeat)."""
        now = float(fields.get("heartbeat", time.time()))
        key = self.keys.worker(worker_id)

        def beat(pipe: Any) -> None:
            pipe.hset(key, mapping={k: v for k, v in fields.items()})
            pipe.expire(key, ttl_s)
            pipe.zadd(self.keys.workers, {worker_id: now})
            # Workers gone for a long time leave the zset (their hash expired long ago).
            pipe.zremrangebyscore(self.keys.workers, "-inf", now - 100 * ttl_s)

        await self._pipe(beat, transaction=True)

    def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's heartbeat (clean exit)."""
        self.redis.delete(self.keys.worker(worker_id))
        self.redis.zrem(self.keys.workers, worker_id)

    async def trim_index(self, page: int = 1000, max_checked: int = 20_000) -> int:
        """Drop ids of expired jobs from the `jobs` index; returns how many. Walks the entries older than the
        retention page by page past live ones (a job can outlive the retention while queued or running), checking
        at most `max_checked` per call; the next call resumes where this one stopped."""
        cutoff_ms = (time.time() - self.result_ttl_s) * 1000
        offset = self._trim_offset
        checked = removed = 0
        while checked < max_checked:
            (rows,) = await self._pipe(functools.partial(_page, self.keys.jobs, cutoff_ms, offset, page))
            old = [text(i) for i in rows]
            if not old:
                offset = 0  # walked to the end: the next call starts again from the oldest
                break
            exists = await self._pipe(functools.partial(_each, "exists", [self.keys.job(job_id) for job_id in old]))
            gone = [job_id for job_id, live in zip(old, exists, strict=True) if not live]
            if gone:
                # A stream a stale run appended to after its job was compacted has no expiry: it goes with its job.
                await self._pipe(functools.partial(_forget_jobs, self.keys.jobs, gone, self.keys.events))
            checked += len(old)
            removed += len(gone)
            offset += len(old) - len(gone)  # the live ones stay in front of the next page
        self._trim_offset = offset
        return removed


def _page(key: str, max_score: float, offset: int, count: int, pipe: Any) -> None:
    pipe.zrangebyscore(key, "-inf", max_score, start=offset, num=count)


def _each(command: str, keys: list[str], pipe: Any) -> None:
    for key in keys:
        getattr(pipe, command)(key)


def _forget_jobs(index: str, job_ids: list[str], stream_of: Callable[[str], str], pipe: Any) -> None:
    pipe.delete(*[stream_of(job_id) for job_id in job_ids])
    pipe.zrem(index, *job_ids)


def _texts(reply: Any) -> list[str]:
    return [text(item) for item in reply]


def _written(reply: Any) -> Written:
    """WRITE's (or RECOVER's) answer: LOST stale, WRITTEN, CANCELLED instead (the cancel flag, at a write to queued
    or deferred)."""
    answer = int(reply)
    return CANCELLED if answer == Write.CANCELLED else answer == Write.WRITTEN


def make_worker_store(settings: Settings, client: redis.Redis | None = None) -> WorkerJobStore:
    """A WorkerJobStore on `settings`' Redis."""
    return WorkerJobStore.for_settings(settings, client)
