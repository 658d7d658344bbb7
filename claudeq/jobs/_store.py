"""JobStore: the job records and their events in Redis, as producers (and both sides) use them."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypedDict

import redis
from pydantic import BaseModel, ValidationError

from claudeq import connections
from claudeq.archive import Archive, open_archive
from claudeq.errors import JobNotFound, JobSpecError, RecordUnreadable
from claudeq.keys import Keys, text
from claudeq.resp import PackedCall, pack_command, packed_capable
from claudeq.script_calls import PipeCall, ScriptCall, done, raw_reply, run_call
from claudeq.tenants import TAG, TagArgs

from . import _scripts as scripts

if TYPE_CHECKING:
    from claudeq.config.settings import Settings
from claudeq.artifacts import Artifacts
from claudeq.events import Cancelled, Unreadable
from claudeq.models import (
    Attempt,
    Event,
    JobError,
    JobRecord,
    JobResult,
    JobSpec,
    JobStatus,
    PlannedSession,
    utcnow,
)
from claudeq.workspaces import WorkspaceChange

#: Hash fields stored as JSON documents; the rest are plain strings.
_JSON_FIELDS = (
    "spec",
    "attempts",
    "result",
    "error",
    "session_plan",
    "notifications",
    "approval",
    "workspace",
    "artifacts",
)
_JSON_FIELD_SET = frozenset(_JSON_FIELDS)
_TIME_FIELDS = ("created_at", "started_at", "finished_at", "ready_at")
_STR_FIELDS = ("account", "worker", "session_id", "traceparent", "wait_reason")
#: The record's field that says a cancel was asked for while the job ran (set by CANCEL, dropped when the job ends).
CANCEL_FIELD = "cancel"
#: The record's field that says its producer put the job in its tenant's active-job index (a fleet that uses
#: tenants): the job's end takes it out. Absent: there is no entry to take out.
INDEXED_FIELD = "indexed"
#: The record's field that says the job has end notifications (a webhook, a link): its end puts it in the outbox.
NOTIFY_FIELD = "notify"
#: The record's field that says its webhook follows chosen events (CREATE puts the job in the outbox at once).
NOTIFY_EVENTS_FIELD = "notify_events"
#: The record's field holding the entry id of the last event its webhook was sent (worker/background/notifier.py).
WEBHOOK_CURSOR_FIELD = "webhook_cursor"


class JobFields(TypedDict, total=False):
    """The record fields a write may set (status and fence move only through the scripts): a misspelt field is a type
    error, not a stray hash field."""

    attempts: list[Attempt]
    result: JobResult | None
    error: JobError | None
    session_id: str | None
    account: str | None
    ready_at: datetime
    finished_at: datetime
    session_plan: PlannedSession
    workspace: WorkspaceChange
    wait_reason: str
    artifacts: Artifacts


def stored_time(value: datetime) -> str:
    """A record's timestamp: ISO 8601, UTC written `Z` (`+00:00` makes the field outgrow a smaller allocation)."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def compact_json(model: BaseModel) -> str:
    """A stored document: compact JSON without the fields at their defaults (a spec is mostly defaults). It reads back
    as the same model; records written with every field spelled out (older versions) read the same way.

    The model's serializer is called directly: what `model_dump_json(exclude_defaults=True)` calls, without its
    wrapper passing fifteen arguments at their defaults (the engine loop encodes ~4 documents per job:
    docs/scaling.md#the-engines-redis-client)."""
    return model.__pydantic_serializer__.to_json(model, exclude_defaults=True).decode()


#: What `encode_event` leaves out, by (no attempt, no data): constant sets, not one built per event.
_EVENT_EXCLUDE: dict[tuple[bool, bool], set[str] | None] = {
    (False, False): None,
    (True, False): {"attempt"},
    (False, True): {"data"},
    (True, True): {"attempt", "data"},
}
_EVENT_SERIALIZER = Event.__pydantic_serializer__


def encode_event(event: Event) -> str:
    """An event as stored (stream entry, compacted list): JSON without the fields at their defaults (no attempt, no
    data), which read back as the same Event. As `event.model_dump_json(exclude=...)` writes it, by the serializer
    that calls (`compact_json`): the engine loop encodes ~8 events per job."""
    exclude = _EVENT_EXCLUDE[event.attempt is None, not event.data]
    return _EVENT_SERIALIZER.to_json(event, exclude=exclude).decode()


def _create_fields(record: JobRecord, indexed: bool = False) -> list[str]:
    """A new record's hash fields. No `fence` (a job never claimed has fence 0) and no empty attempts: the record
    reads them as absent. `indexed`: the producer puts the job in its tenant's active-job index (INDEXED_FIELD); CREATE
    puts it in its tenant's job index then too (`Keys.tenant_index`)."""
    fields = encode_fields(
        {
            "status": record.status,
            "spec": record.spec,
            "attempts": record.attempts,
            "created_at": record.created_at,
            "traceparent": record.traceparent,
        }
    )
    spec = record.spec
    if spec.depends_on:  # CREATE reads them from the fields (claudeq/lua/job/create.lua)
        fields += ["deps", json.dumps(spec.depends_on), "dep_mode", spec.on_dependency_failure]
    if spec.webhook is not None or spec.link is not None or spec.link_error is not None:
        fields += [NOTIFY_FIELD, "1"]  # its end goes into the outbox (claudeq/lua/lib/notify_end.lua)
    if spec.webhook is not None and spec.webhook.events:
        fields += [NOTIFY_EVENTS_FIELD, "1"]  # and, now, the job: its webhook follows its events
    return [*fields, INDEXED_FIELD, "1"] if indexed else fields


def _scripted(record: JobRecord) -> bool:
    """Whether a batch writes `record` through SUBMIT (what it writes depends on what Redis holds: an idempotency
    key, a conversation's turn, a webhook following its events) rather than as plain commands."""
    spec = record.spec
    return bool(spec.idempotency_key or spec.conversation or (spec.webhook is not None and spec.webhook.events))


def _created_ms(record: JobRecord) -> int:
    """The job's score in the `jobs` index (and its tenant's): its creation time in epoch ms."""
    return int(record.created_at.timestamp() * 1000)


def encode_fields(fields: Mapping[str, object]) -> list[str]:
    """Flatten record fields into Redis hash field/value pairs. A field with no value (None, an empty list) is left
    out: the record reads it as absent either way, and a hash field costs memory. (One loop, no call per field: the
    engine loop encodes ~9 fields per job, docs/scaling.md#the-engines-redis-client.)"""
    out: list[str] = []
    for field, value in fields.items():
        if value is None:
            continue
        if field in _JSON_FIELD_SET:
            if isinstance(value, list):
                if not value:
                    continue
                encoded = "[" + ",".join([compact_json(v) for v in value]) + "]"
            else:
                assert isinstance(value, BaseModel)
                encoded = compact_json(value)
        elif isinstance(value, datetime):
            encoded = stored_time(value)
        else:
            encoded = str(value)
            if not encoded or encoded == "[]":
                continue
        out += [field, encoded]
    return out


class BrokerMessage(NamedTuple):
    """A submitted job's `claudeq.run` message (claudeq/broker/_message.py) and its broker list, built by the producer;
    `backlog_message` is the same message at the broker's last priority step (BACKLOG_PRIORITY) and `backlog_list`
    its list, sent instead when the job's tenant is backlogged ('' both: never, as without a tenants file)."""

    queue_list: str
    message: str
    backlog_list: str = ""
    backlog_message: str = ""


class ActiveIndex(NamedTuple):
    """The active-job index a submitted job goes into: its governing tenant's (`Keys.tenant_jobs`), with the tenant's
    fair-share weight for its tag ('' = no tag: no tenants file) and how many jobs not finished, the new one
    included, the tenant may have before its messages go to the broker's last priority step (`backlog`)."""

    tenant: str
    weight: str = ""
    backlog: int = 0


class JobStore:
    """What producers (and workers) do with job state: create, read, cancel, events. Each status change is one atomic
    Lua script (claudeq/jobs/_scripts.py); what only workers do is `claudeq.worker.store.job_store.WorkerJobStore`."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        result_ttl_s: int,
        events_maxlen: int,
        conversation_ttl_s: int | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self.events_maxlen = events_maxlen
        #: How long a conversation's turn order lives after its last submit or turn (the session retention).
        self.conversation_ttl_s = conversation_ttl_s if conversation_ttl_s is not None else result_ttl_s
        #: The queue named in the `submitted` event of a job that set none (make_store sets the fleet's default).
        self.default_queue: str | None = None
        self._announced: dict[str, float] = {}  # job id -> when this store last announced following it (monotonic)
        #: Where finished jobs' events go after `archive_after_s` (for_settings opens the settings' archive).
        self.archive: Archive | None = None
        self._create = client.register_script(scripts.CREATE)
        self._submit = client.register_script(scripts.SUBMIT)
        self._tag = client.register_script(TAG)  # a batch's plain jobs' fair-share tags (submit_many_call)
        self._cancel = client.register_script(scripts.CANCEL)

    @classmethod
    def for_settings(cls, settings: Settings, client: redis.Redis | None = None) -> Self:
        """A store on `settings`' Redis (a client of its own unless one is given), with the fleet's retention."""
        store = cls(
            client or connections.sync_client(settings),
            Keys(settings.key_prefix),
            result_ttl_s=settings.result_ttl_s,
            events_maxlen=settings.events_maxlen,
            conversation_ttl_s=settings.session_retention_s,
        )
        store.default_queue = settings.queue
        store.archive = open_archive(settings.archive_url)
        return store

    # ---- create and read -------------------------------------------------------------------------------------

    def submit_many_call(
        self, jobs: Sequence[tuple[JobRecord, BrokerMessage, ActiveIndex | None]], now: float
    ) -> PackedCall[list[tuple[str, bool]]] | PipeCall[list[tuple[str, bool]]]:
        """A producer's submit of many jobs (a batch's chunk), in order, in one round trip and one MULTI/EXEC (all of
        them or none): what `submit_call` writes for each (record, broker message, active-job index; every job of a
        call indexed or none). -> (id, created) per job. The messages come at the priority step the producer chose
        for the chunk (`backlog_call`): a batch decides its tenants' backlog once per chunk, not per job.

        A job with an idempotency key, a conversation or a webhook following its events goes through SUBMIT (only a
        job it created gets its index entry, tag and message); every other one is what SUBMIT would write for it as
        plain commands: its `HSET` (and, with a tenants file, its `TAG`, in submit order), and the chunk's entries
        in `jobs`, `queued`, each tenant's job index and active-job index one `ZADD` each, its messages one `LPUSH`
        per broker list (in submit order): about one command per job instead of five. A client the packed path
        cannot drive (fakeredis, wrappers) sends one SUBMIT per job in a MULTI/EXEC pipeline instead."""
        if not packed_capable(self.redis):
            return self._submit_each_call(jobs, now)
        # The scripts loaded first, on the same connection: the EVALSHAs after them find them even on a fresh Redis.
        scripted = [_scripted(record) for record, _, _ in jobs]
        commands = [pack_command("SCRIPT", "LOAD", scripts.SUBMIT)] if any(scripted) else []
        if any(index is not None and index.weight for _, _, index in jobs):
            commands.append(pack_command("SCRIPT", "LOAD", TAG))
        commands.append(pack_command("MULTI"))
        first = len(commands)
        at: list[int] = []  # per job: its first command's place in EXEC's answer (SUBMIT's answers for its job)
        members: dict[str, list[str | int | float]] = {}  # sorted set -> its new members, as ZADD takes them
        trimmed: set[str] = set()  # of those, the tenants' job indexes (trimmed after, as CREATE does)
        lists: dict[str, list[str]] = {}  # broker list -> its messages not yet pushed, in submit order

        def push() -> None:  # the messages so far, before a SUBMIT's own: each list keeps submit order
            commands.extend(pack_command("LPUSH", name, *messages) for name, messages in lists.items())
            lists.clear()

        for (record, broker, index), by_script in zip(jobs, scripted, strict=True):
            if by_script:
                push()
                call = self.submit_call(record, now, broker, index)
                at.append(len(commands) - first)
                commands.append(pack_command("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args))
                continue
            at.append(len(commands) - first)
            commands.append(pack_command("HSET", self.keys.job(record.id), *_create_fields(record, index is not None)))
            members.setdefault(self.keys.jobs, []).extend([_created_ms(record), record.id])
            members.setdefault(self.keys.queued, []).extend([now, record.id])
            if index is not None:
                tenant_index = self.keys.tenant_index(record.spec.tenant)
                trimmed.add(tenant_index)
                members.setdefault(tenant_index, []).extend([_created_ms(record), record.id])
                members.setdefault(self.keys.tenant_jobs(index.tenant), []).extend([now, record.id])
                if index.weight:
                    tag = TagArgs(
                        fair_share=self.keys.fair_share,
                        job=self.keys.job(record.id),
                        tenant=index.tenant,
                        weight=index.weight,
                    )
                    commands.append(pack_command("EVALSHA", self._tag.sha, len(tag.keys()), *tag.keys(), *tag.argv()))
            lists.setdefault(broker.queue_list, []).append(broker.message)
        commands.extend(self._index_commands(members, trimmed, now))
        push()
        commands.append(pack_command("EXEC"))

        def parse(replies: list[Any]) -> list[tuple[str, bool]]:
            results = replies[-1]
            failed = next((r for r in results if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            return [
                create_reply(results[i]) if by_script else (record.id, True)
                for (record, _, _), by_script, i in zip(jobs, scripted, at, strict=True)
            ]

        return PackedCall(self.redis, commands, parse)

    def _submit_each_call(
        self, jobs: Sequence[tuple[JobRecord, BrokerMessage, ActiveIndex | None]], now: float
    ) -> PipeCall[list[tuple[str, bool]]]:
        """`submit_many_call` for a client the packed path cannot drive: one SUBMIT per job in a MULTI/EXEC."""

        def queue(pipe: Any) -> None:
            for record, broker, index in jobs:
                raw_reply(self.submit_call(record, now, broker, index), pipe)

        return PipeCall(self.redis, queue, lambda replies: [create_reply(r) for r in replies], transaction=True)

    def _index_commands(
        self, members: Mapping[str, list[str | int | float]], trimmed: set[str], now: float
    ) -> list[bytes]:
        """A chunk's sorted-set entries, one ZADD per set; a tenant's job index (`trimmed`) trimmed after its ZADD
        as CREATE does."""
        commands: list[bytes] = []
        for name, added in members.items():
            commands.append(pack_command("ZADD", name, *added))
            if name in trimmed:
                trim = scripts.TrimIndexArgs(
                    index=name,
                    job_key_prefix=self.keys.job(""),
                    cutoff_ms=self._index_cutoff_ms(now),
                    n=len(added),
                )
                commands.append(pack_command("EVAL", scripts.TRIM_INDEX, len(trim.keys()), *trim.keys(), *trim.argv()))
        return commands

    def backlog_call(self, batch: Mapping[str, int], backlog: int) -> PipeCall[set[str]]:
        """The tenants of a batch's chunk (`batch`: tenant -> its jobs in the chunk) whose jobs not finished, the
        chunk's included, would be more than `backlog` (TENANT_BACKLOG): their messages go at the broker's last
        priority step (docs/architecture.md#fair-share). One `ZCARD` per tenant of its active-job index."""
        names = list(batch)

        def queue(pipe: Any) -> None:
            for name in names:
                pipe.zcard(self.keys.tenant_jobs(name))

        def parse(replies: list[Any]) -> set[str]:
            return {name for name, active in zip(names, replies, strict=True) if batch[name] + int(active) > backlog}

        return PipeCall(self.redis, queue, parse)

    def create_call(
        self, record: JobRecord, now: float | None = None, indexed: bool = False
    ) -> ScriptCall[tuple[str, bool]]:
        """Write a new `queued` record (CREATE); with an idempotency key, answer the existing id instead. -> (id,
        created). `now` is the send time of the job's first message (its score in the `queued` set). A conversation
        turn gets its turn number here, in the order the CREATEs run. `indexed`: see _create_fields. A producer's
        submit writes the record with the rest of what a submit writes: `submit_call`."""
        return self._create_args(record, time.time() if now is None else now, indexed).call(self._create, create_reply)

    def submit_call(
        self, record: JobRecord, now: float, broker: BrokerMessage, index: ActiveIndex | None = None
    ) -> ScriptCall[tuple[str, bool]]:
        """A producer's submit of one job (SUBMIT), atomic and one round trip whatever the spec: the record as
        `create_call` writes it and, only if it was created (an idempotency key may name a live job instead), the job
        in its tenant's active-job index (`index`; None: the fleet keeps none) with its fair-share tag, and, unless it
        waits for its dependencies, its broker message (`broker`). -> (id, created). `now` is the message's send time
        and the job's score in `queued` and in the index: the same (the reconciler relies on it)."""
        idx = index or ActiveIndex("")
        return scripts.SubmitArgs(
            tenant_jobs=self.keys.tenant_jobs(idx.tenant) if index else "",
            fair_share=self.keys.fair_share if idx.weight else "",
            broker_list=broker.queue_list,
            backlog_list=broker.backlog_list,
            tenant=idx.tenant,
            weight=idx.weight,
            backlog=idx.backlog,
            message=broker.message,
            backlog_message=broker.backlog_message,
            create=self._create_args(record, now, index is not None),
        ).call(self._submit, create_reply)

    def _create_args(self, record: JobRecord, now: float, indexed: bool) -> scripts.CreateArgs:
        """CREATE's arguments for `record` (SUBMIT runs CREATE's write with them)."""
        idem = record.spec.idempotency_key
        conversation = record.spec.conversation
        return scripts.CreateArgs(
            job=self.keys.job(record.id),
            jobs=self.keys.jobs,
            queued=self.keys.queued,
            idem=self.keys.idem(idem, record.spec.tenant) if idem else "",
            conversation_waiters=self.keys.conversation_waiters(conversation, record.spec.tenant)
            if conversation
            else "",
            conversation_seq=self.keys.conversation_seq(conversation, record.spec.tenant) if conversation else "",
            tenant_index=self.keys.tenant_index(record.spec.tenant) if indexed else "",
            waiting=self.keys.waiting,
            outbox=self.keys.outbox,
            job_id=record.id,
            created_ms=_created_ms(record),
            now_s=now,
            job_key_prefix=self.keys.job(""),
            conversation_ttl_s=self.conversation_ttl_s,
            index_cutoff_ms=self._index_cutoff_ms(now),
            fields=_create_fields(record, indexed),
        )

    def _index_cutoff_ms(self, now: float) -> int:
        """Entries of a tenant's job index created before this (ms) may be of expired jobs (see
        claudeq/lua/lib/index_job.lua)."""
        return int((now - self.result_ttl_s) * 1000)

    # Each read is a call (claudeq/script_calls.py): its commands, read with raise_on_error=False (a key that is not
    # a record is that job's RecordUnreadable), and the parsing of their replies; the worker's event loop sends the
    # same calls on its async client (claudeq.worker.store.reads.LoopReads). A result or history that moved to the
    # transcript archive is read from its database (sync): such replies are `blocking`.

    def get_call(self, job_id: str) -> PipeCall[JobRecord]:
        """The record of `job_id`; JobNotFound or RecordUnreadable when it cannot be had."""

        def parse(replies: list[Any]) -> JobRecord:
            fields = record_reply(job_id, replies[0])
            self._archived_results([(job_id, fields)])
            return parse_record(job_id, fields)

        def blocking(replies: list[Any]) -> bool:
            found = replies[0]
            return isinstance(found, dict) and bool(self._moved_results([(job_id, {text(k): "" for k in found})]))

        key = self.keys.job(job_id)
        return PipeCall(self.redis, lambda pipe: pipe.hgetall(key), parse, raise_on_error=False, blocking=blocking)

    def records_call(self, job_ids: Sequence[str]) -> PipeCall[list[JobRecord | RecordUnreadable | None]]:
        """The records of `job_ids` in one round trip (None: no such job), without their compacted events: what a
        listing shows of each (HMGET of the record's fields, however long its history grew)."""

        def queue(pipe: Any) -> None:
            for job_id in job_ids:
                pipe.hmget(self.keys.job(job_id), LISTING_FIELDS)

        def parse(replies: list[Any]) -> list[JobRecord | RecordUnreadable | None]:
            read, out = listing_replies(job_ids, replies)
            self._archived_results(read)
            return listing_records(job_ids, read, out)

        def blocking(replies: list[Any]) -> bool:
            read, _ = listing_replies(job_ids, replies)
            return bool(self._moved_results(read))

        return PipeCall(self.redis, queue, parse, raise_on_error=False, blocking=blocking)

    def _archived_results(self, records: list[tuple[str, dict[str, str]]]) -> None:
        """Put back the results that moved to the archive with their job's history (records marked `archived`
        without a `result`), read in one query."""
        moved = self._moved_results(records)
        if not moved or self.archive is None:
            return
        found = self.archive.get_results(self.keys.prefix, moved)
        for job_id, fields in records:
            if job_id in found:
                fields["result"] = found[job_id]

    def _moved_results(self, records: list[tuple[str, dict[str, str]]]) -> list[str]:
        """Of `records`, the jobs whose result moved to the archive (none without an archive)."""
        if self.archive is None:
            return []
        return [job_id for job_id, f in records if ARCHIVED_FIELD in f and "result" not in f]

    def status_call(self, job_id: str) -> PipeCall[JobStatus | None]:
        """Only the status (cheap), or None when the job does not exist; RecordUnreadable when its key is not a
        record."""
        key = self.keys.job(job_id)
        return PipeCall(
            self.redis,
            lambda pipe: pipe.hget(key, "status"),
            lambda replies: status_reply(job_id, replies[0]),
            raise_on_error=False,
        )

    def list_jobs(
        self,
        status: str | None = None,
        limit: int = 50,
        *,
        index: str | None = None,
        tenant: str | None = None,
        parent_job_id: str | None = None,
        since_ms: int | None = None,
    ) -> list[JobRecord | RecordUnreadable]:
        """Newest first, from `index` (default: the fleet's `jobs`; a tenant's `Keys.tenant_index`); unreadable
        records are returned as their error, not raised (left out when listing a tenant's or a parent's jobs). Filters:
        `status`, `tenant`, `parent_job_id` (`JobRecord.parent_job_id`), and `since_ms`: only entries created at or
        after it (a job's children are created after it). The index is walked until `limit` jobs matched or it
        ends: exact, however many other jobs there are. Ids in a tenant's index whose record expired are dropped
        from it as they are met."""
        source = index or self.keys.jobs
        scoped = tenant is not None or parent_job_id is not None  # an unreadable record is nobody's: left out
        out: list[JobRecord | RecordUnreadable] = []
        gone: list[str] = []
        start, page = 0, max(limit * 2, 100)
        while len(out) < limit:
            if since_ms is None:
                raw_ids = self.redis.zrevrange(source, start, start + page - 1)
            else:
                raw_ids = self.redis.zrevrangebyscore(source, "+inf", since_ms, start=start, num=page)
            ids = [text(i) for i in raw_ids]
            if not ids:
                break
            pipe = self.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            replies = pipe.execute(raise_on_error=False)
            read = [(i, record_fields(r)) for i, r in zip(ids, replies, strict=True) if r and isinstance(r, dict)]
            self._archived_results(read)
            fields_of = dict(read)
            for job_id, raw in zip(ids, replies, strict=True):
                if isinstance(raw, redis.ResponseError):  # the key is not a hash: report it, list the rest
                    if status is None and not scoped:
                        out.append(_unreadable_key(job_id, raw))
                    continue
                if not raw:
                    gone.append(job_id)
                    continue
                fields = fields_of[job_id]
                if status is not None and fields.get("status") != status:
                    continue
                try:
                    record = parse_record(job_id, fields)
                except RecordUnreadable as exc:
                    if not scoped:
                        out.append(exc)
                    continue
                if (tenant is None or record.spec.tenant == tenant) and (
                    parent_job_id is None or record.parent_job_id == parent_job_id
                ):
                    out.append(record)
                if len(out) >= limit:
                    break
            start += page
        if gone and index is not None and index != self.keys.jobs:  # `jobs` is the reconciler's to trim
            self.redis.zrem(index, *gone)
        return out

    def count_by_status(self) -> dict[str, int]:
        """Jobs per status among those still retained."""
        counts: dict[str, int] = {}
        for chunk in _chunks(self.redis.zrange(self.keys.jobs, 0, -1), 500):
            pipe = self.redis.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hget(self.keys.job(text(job_id)), "status")
            for value in pipe.execute():
                if value is not None:
                    counts[text(value)] = counts.get(text(value), 0) + 1
        return counts

    # ---- cancel ----------------------------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "cancelled by request") -> str:
        """Cancel: a queued/deferred job at once; a running one gets the flag and a wake-up. -> what happened."""
        error = JobError(kind="cancelled", message=reason).model_dump_json()
        args = scripts.CancelArgs(
            job=self.keys.job(job_id),
            deferred=self.keys.deferred,
            queued=self.keys.queued,
            stream=self.keys.events(job_id),
            outbox=self.keys.outbox,
            waiting=self.keys.waiting,
            job_id=job_id,
            now_iso=stored_time(utcnow()),
            ttl_s=self.result_ttl_s,
            error_json=error,
            event_json=encode_event(Cancelled(reason=reason).event()),
            events_maxlen=self.events_maxlen,
            finished_counts_prefix=self.keys.finished_counts_prefix,
        )
        result = text(self._cancel(keys=args.keys(), args=args.argv()))
        if result == "running":
            self.redis.publish(self.keys.cancel_channel, job_id)
        return result

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel flag is set for the job (its record's `cancel` field)."""
        return bool(self.redis.hexists(self.keys.job(job_id), CANCEL_FIELD))

    # ---- events ----------------------------------------------------------------------------------------------

    def append_event(self, job_id: str, event: Event) -> str:
        """Add an event to the job's stream (trimmed to about `events_maxlen`)."""
        entry_id = self.redis.xadd(
            self.keys.events(job_id),
            {"event": encode_event(event)},
            maxlen=self.events_maxlen,
            approximate=True,
        )
        return text(entry_id)

    def read_events(
        self, job_id: str, after: str = "0-0", block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, Event]]:
        """Events after entry id `after`; with `block_ms`, wait that long for new ones.

        A job's events live in three places over its life, read here as one sequence: `submitted` is made from the
        record (entry id `0-1`: no stream exists for a job that has no other event yet), the others are in the
        job's stream while it is active, and in the record's `events` field once it finished (the stream is
        compacted into it by the script that writes the terminal status, and expires with the record)."""
        if block_ms is None:
            return run_call(self.events_call(job_id, after, count))
        head = self._submitted_event(job_id) if after == "0-0" else None
        if head is not None:  # something to return already: do not block
            return run_call(self.events_call(job_id, after, count))
        res: Any = self.redis.xread({self.keys.events(job_id): after}, count=count, block=block_ms)
        entries = res[0][1] if res else []
        compacted, archived = self.redis.hmget(self.keys.job(job_id), ["events", ARCHIVED_FIELD])
        if not compacted and archived and self.archive is not None:
            compacted = self.archive.get_events(self.keys.prefix, job_id)  # moved to the archive after its end
        return events_page(after, count, None, entries, compacted)

    def events_call(self, job_id: str, after: str = "0-0", count: int = 500) -> PipeCall[list[tuple[str, Event]]]:
        """`read_events` without blocking, in one round trip: the record's creation (the `submitted` event, when read
        from the start), the stream's entries after `after`, the compacted events and the `archived` mark (a
        finished job's history that moved to the archive is read from its database: `blocking`)."""
        start = f"({SUBMITTED_ENTRY_ID}" if after == "0-0" else f"({after}"
        key = self.keys.job(job_id)

        def queue(pipe: Any) -> None:
            if after == "0-0":
                pipe.hmget(key, ["created_at", "spec"])
            pipe.xrange(self.keys.events(job_id), min=start, count=count)
            pipe.hmget(key, ["events", ARCHIVED_FIELD])

        def parse(replies: list[Any]) -> list[tuple[str, Event]]:
            head = self._submitted_of(*_raised(replies[0])) if after == "0-0" else None
            entries, (compacted, archived) = _raised(replies[-2]), _raised(replies[-1])
            if not compacted and archived and self.archive is not None:
                compacted = self.archive.get_events(self.keys.prefix, job_id)  # moved to the archive after its end
            return events_page(after, count, head, entries, compacted)

        def blocking(replies: list[Any]) -> bool:
            compacted, archived = replies[-1] if isinstance(replies[-1], list) else (None, None)
            return self.archive is not None and not compacted and bool(archived)

        return PipeCall(self.redis, queue, parse, raise_on_error=False, blocking=blocking)

    def _submitted_event(self, job_id: str) -> Event | None:
        return self._submitted_of(*self.redis.hmget(self.keys.job(job_id), ["created_at", "spec"]))

    def _submitted_of(self, created_at: Any, spec: Any) -> Event | None:
        if created_at is None:
            return None
        try:
            queue = json.loads(spec or b"{}").get("queue")
        except (ValueError, AttributeError):
            queue = None
        try:
            # Validated from the stored text as any stored event is (the record keeps created_at as ISO 8601).
            return Event.model_validate(
                {"type": "submitted", "at": text(created_at), "data": {"queue": queue or self.default_queue}}
            )
        except ValidationError:
            return None

    def announce_follow(self, job_id: str, now: float | None = None) -> None:
        """Say that someone follows `job_id`'s events: the worker running it stores them within 0.1 s instead of
        letting them wait for its next write (a PUBLISH; every FOLLOW_ANNOUNCE_S while following). At most one
        announcement per FOLLOW_ANNOUNCE_S per job from this store; a failure only means the events come later."""
        try:
            run_call(self.announce_call(job_id, now))
        except redis.RedisError:
            pass

    def announce_call(self, job_id: str, now: float | None = None) -> PipeCall[None]:
        """`announce_follow`'s PUBLISH, when this store announces following `job_id` now (at most once per
        FOLLOW_ANNOUNCE_S; noted as sent); otherwise no command (an empty pipeline: no round trip)."""
        now = time.monotonic() if now is None else now
        due = now - self._announced.get(job_id, -FOLLOW_ANNOUNCE_S) >= FOLLOW_ANNOUNCE_S
        if due:
            self._announced[job_id] = now
            if len(self._announced) > 1000:  # forget old jobs
                self._announced = {k: v for k, v in self._announced.items() if now - v < FOLLOW_ANNOUNCE_S}
        channel = self.keys.follow_channel
        return PipeCall(self.redis, lambda pipe: pipe.publish(channel, job_id) if due else None, done)


#: How often a follower announces itself (s): the worker holds a followed job's events for at most 0.1 s while
#: announcements keep coming (claudeq.worker.delivery.fenced.FOLLOW_HOLD_S is a few of these).
FOLLOW_ANNOUNCE_S = 2.0

#: The entry id of the `submitted` event read_events makes from the record (before any stream entry id).
SUBMITTED_ENTRY_ID = "0-1"


def _entry_key(entry_id: object) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


#: The record field saying its compacted events moved to the transcript archive (claudeq/archive.py).
ARCHIVED_FIELD = "archived"
#: zlib level of a finished job's packed events: ~1 ms per 100 KB, a few hundred bytes fewer than level 6. The
#: settings measured against it (a smaller memLevel, levels 7 and 8) save no time on a job's events or pack other
#: bytes: docs/performance.md#packing-a-jobs-events.
EVENTS_ZLIB_LEVEL = 9


def pack_events(raw: bytes) -> bytes | None:
    """A record's compacted `events` (their JSON text) as the worker that finished the job stores them: zlib-
    compressed, which the producer install reads with the standard library (zstd would need a package; on a job's
    events the two are within a few percent: bench/bench_weight.py). None when that would not make them smaller."""
    packed = zlib.compress(raw, EVENTS_ZLIB_LEVEL)
    return packed if len(packed) < len(raw) else None


def unpack_events(raw: Any) -> Any:
    """A record's `events` field as JSON text, whichever form it has: JSON (`[`: as the status scripts compact a
    stream) or packed (a zlib header). Raises ValueError when it is neither."""
    if isinstance(raw, bytes) and raw[:1] == b"x":
        try:
            return zlib.decompress(raw)
        except zlib.error as exc:
            raise ValueError(f"unreadable packed events: {exc}") from exc
    return raw


def record_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    """A job hash as read (HGETALL) as the text fields a record is parsed from: its compacted `events` are not part
    of the record (read_events reads them; packed, they are not text)."""
    return {text(k): text(v) for k, v in raw.items() if k != b"events" and k != "events"}


def _compacted_events(raw: Any, after: str) -> list[tuple[str, Any]]:
    """(entry id, event JSON) of a record's compacted `events` field, those after `after`."""
    try:
        entries = json.loads(unpack_events(raw))
    except ValueError:
        return []
    floor = _entry_key(after)
    return [
        (str(e[0]), e[1])
        for e in entries
        if isinstance(e, list) and len(e) == 2 and isinstance(e[1], str) and _entry_key(e[0]) > floor
    ]


def _unreadable_key(job_id: str, exc: redis.ResponseError) -> RecordUnreadable:
    """A job key Redis refused to read as a record (e.g. WRONGTYPE: something else wrote a string there)."""
    return RecordUnreadable(job_id, f"its key is not a record ({str(exc).split(' ', 1)[0]})")


def _raised(reply: Any) -> Any:
    """A pipeline's reply, raised when it is an error."""
    if isinstance(reply, Exception):
        raise reply
    return reply


#: The fields a listing reads of each record (`JobStore.records_call`).
LISTING_FIELDS = ["status", "fence", ARCHIVED_FIELD, *_JSON_FIELDS, *_TIME_FIELDS, *_STR_FIELDS]


def record_reply(job_id: str, reply: Any) -> dict[str, str]:
    """HGETALL's reply for a record as its fields; JobNotFound, or RecordUnreadable for a key that is not one."""
    if isinstance(reply, redis.ResponseError):
        raise _unreadable_key(job_id, reply)
    if not reply:
        raise JobNotFound(job_id)
    return record_fields(_raised(reply))


def status_reply(job_id: str, reply: Any) -> JobStatus | None:
    """HGET status's reply (None: no such job); RecordUnreadable for a key that is not a record."""
    if isinstance(reply, redis.ResponseError):
        raise _unreadable_key(job_id, reply)
    return None if _raised(reply) is None else text(reply)  # type: ignore[return-value]


def listing_replies(
    job_ids: Sequence[str], replies: Sequence[Any]
) -> tuple[list[tuple[str, dict[str, str]]], list[JobRecord | RecordUnreadable | None]]:
    """The HMGETs of a listing as (job id, fields read) and the answer so far (a key that is not a record already
    answered: its RecordUnreadable)."""
    read: list[tuple[str, dict[str, str]]] = []
    out: list[JobRecord | RecordUnreadable | None] = []
    for job_id, reply in zip(job_ids, replies, strict=True):
        if isinstance(reply, redis.ResponseError):
            out.append(_unreadable_key(job_id, reply))
            continue
        values = zip(LISTING_FIELDS, _raised(reply), strict=True)
        fields = {name: text(value) for name, value in values if value is not None}
        read.append((job_id, fields))
        out.append(None)
    return read, out


def listing_records(
    job_ids: Sequence[str], read: list[tuple[str, dict[str, str]]], out: list[JobRecord | RecordUnreadable | None]
) -> list[JobRecord | RecordUnreadable | None]:
    """A listing's answer: each record parsed from its fields (None: no such job)."""
    fields_of = dict(read)
    for i, job_id in enumerate(job_ids):
        found = fields_of.get(job_id)
        if out[i] is not None or not found:
            continue
        try:
            out[i] = parse_record(job_id, found)
        except RecordUnreadable as exc:
            out[i] = exc
    return out


def events_page(after: str, count: int, head: Event | None, entries: Any, compacted: Any) -> list[tuple[str, Event]]:
    """read_events' answer: the `submitted` event made from the record (`head`), then the stream's entries merged
    with the compacted ones after `after`, at most `count` in all."""
    out: list[tuple[str, Event]] = []
    if head is not None:
        out.append((SUBMITTED_ENTRY_ID, head))
        after = SUBMITTED_ENTRY_ID
    pairs = [(text(i), f.get(b"event") or f.get("event") or b"{}") for i, f in entries]
    if compacted:
        # Finished: the stream was moved into the record (a stale run may have appended to a new one since).
        merged = dict(_compacted_events(compacted, after))
        merged.update(pairs)
        pairs = sorted(merged.items(), key=lambda item: _entry_key(item[0]))
    for entry_id, payload in pairs[: max(0, count - len(out))]:
        try:
            out.append((entry_id, Event.model_validate_json(payload)))
        except ValidationError:
            out.append((entry_id, Unreadable(raw=text(payload)[:200]).event()))
    return out


def create_reply(reply: Any) -> tuple[str, bool]:
    """The CREATE script's answer as (job id, created); JobSpecError on `depends_on` when a dependency is gone or
    ended so that the job would fail at once (nothing was written)."""
    code, job_id = int(reply[0]), text(reply[1])
    if code == 2:
        status = text(reply[2])
        reason = "no such job" if status == "missing" else f"it {status}: this job would fail at once"
        raise JobSpecError([("depends_on", f"{job_id}: {reason} (on_dependency_failure='run' runs it anyway)")])
    return job_id, bool(code)


def parse_record(job_id: str, fields: dict[str, str]) -> JobRecord:
    """Build a JobRecord from the hash fields; RecordUnreadable when they do not parse."""
    try:
        data: dict[str, Any] = {
            "id": job_id,
            "status": fields["status"],
            "fence": int(fields.get("fence") or 0),
        }
        for name in _JSON_FIELDS:
            if fields.get(name):
                data[name] = json.loads(fields[name])
        for name in _TIME_FIELDS + _STR_FIELDS:
            if fields.get(name):
                data[name] = fields[name]
        return JobRecord.model_validate(data)
    except (KeyError, ValueError, ValidationError) as exc:
        detail = str(exc).splitlines()[0][:300]
        raise RecordUnreadable(job_id, detail) from None


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = [
    "ActiveIndex",
    "BrokerMessage",
    "JobFields",
    "JobResult",
    "JobSpec",
    "JobStore",
    "encode_event",
    "encode_fields",
    "parse_record",
]
