"""The producer API: submit jobs, read them, follow their events, cancel them, wait for them."""

from __future__ import annotations

import asyncio
import base64
import builtins
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis

from claudeq import approvals as approval_store
from claudeq import durability, tracing
from claudeq.artifacts import unpack
from claudeq.broker import BACKLOG_PRIORITY, list_for, run_message
from claudeq.conversations import NOT_YOURS, ConversationStore
from claudeq.errors import (
    ArtifactNotFound,
    BatchSpecError,
    ClaudeqError,
    JobSpecError,
    JobTimeout,
    NotReplicated,
    RecordUnreadable,
)
from claudeq.events import session_of
from claudeq.follow import blocking
from claudeq.follow import follow as follow_job
from claudeq.jobs import ActiveIndex, BrokerMessage, JobStore
from claudeq.jobs import scripts as job_scripts
from claudeq.keys import text
from claudeq.models import TERMINAL, Event, JobRecord, JobSpec, PendingApproval, utcnow
from claudeq.schedules import Schedule, ScheduleInfo, ScheduleStore, schedule_from
from claudeq.script_calls import run_call
from claudeq.tenants import TenantStore
from claudeq.workspaces import WorkspaceChange

from ..config.celery import TASK_RUN, make_celery
from ..config.settings import Settings, load_settings
from ..config.tenants import DEFAULT_TENANT
from .validation import validate_spec


def _rate_or_zero(schedule: Schedule, now: float) -> float:
    try:
        return schedule.fires_per_hour(now)
    except ValueError:  # a stored rule with no next tick fires nothing (the scheduler pauses it)
        return 0.0


def new_job_id() -> str:
    """A new job id: sortable by time, unique across producers."""
    return f"{time.time_ns() // 1000:014x}{uuid.uuid4().hex[:12]}"


def make_store(settings: Settings, client: redis.Redis | None = None) -> JobStore:
    """A JobStore on `settings`' Redis."""
    return JobStore.for_settings(settings, client)


def send_run(celery_app: Any, settings: Settings, job_id: str, spec: JobSpec) -> None:
    """Send the `claudeq.run` task for a job through Celery's `send_task` (what `push_run` does in one LPUSH)."""
    celery_app.send_task(
        TASK_RUN,
        args=[job_id],
        queue=spec.queue or settings.queue,
        priority=spec.priority,
        task_id=f"{job_id}-{uuid.uuid4().hex[:8]}",
    )


def push_run(client: Any, queue: str, job_id: str, priority: int = 0) -> None:
    """Push the `claudeq.run` message of a job onto its broker list (`client` may be a pipeline)."""
    client.lpush(list_for(queue, priority), run_message(job_id, queue, priority))


#: submit_many writes this many jobs per pipeline round trip.
SUBMIT_CHUNK = 500
#: With tenants configured, a tenant with more jobs not finished than this sends new jobs' messages at the broker's
#: last priority step (BACKLOG_PRIORITY), so a flood waits in the broker behind other tenants' jobs
#: (docs/architecture.md#fair-share).
TENANT_BACKLOG = 100
#: How long a producer without a tenants file trusts what it read about the fleet using tenants (s).
TENANTS_IN_USE_CHECK_S = 30.0


def _pauses(job_id: str, timeout: float | None, poll_s: float) -> Iterator[float]:
    """How long a wait pauses before each read of the job (the first read at once, then every `poll_s`): the one
    schedule of `Client.wait` and `AsyncClient.wait`. JobTimeout once `timeout` seconds have passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    yield 0.0
    while deadline is None or time.monotonic() < deadline:
        yield poll_s
    raise JobTimeout(job_id, timeout or 0)


class JobHandle:
    """A submitted job: its id, plus ways to read it and wait for it."""

    def __init__(self, client: Client, job_id: str, created: bool = True) -> None:
        self.client = client
        self.id = job_id
        self.created = created

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def record(self) -> JobRecord:
        """The job's current record."""
        return self.client.get(self.id)

    def wait(self, timeout: float | None = None, poll_s: float = 0.2) -> JobRecord:
        """Block until the job is finished; JobTimeout after `timeout` seconds (the job goes on)."""
        return self.client.wait(self.id, timeout=timeout, poll_s=poll_s)

    def cancel(self) -> str:
        """Cancel the job (see Client.cancel)."""
        return self.client.cancel(self.id)

    def events(self, follow: bool = False) -> Iterator[Event]:
        """The job's events (see Client.events)."""
        return self.client.events(self.id, follow=follow)


class Client:
    """Synchronous producer client. Thread-safe; one per process is enough."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        redis_client: redis.Redis | None = None,
        celery_app: Any = None,
    ) -> None:
        self.settings = settings or load_settings()
        self.store = make_store(self.settings, redis_client)
        self._celery = celery_app
        self._conversations = ConversationStore(self.store.redis, self.store.keys, self.settings.session_retention_s)
        self._tenants_in_use: tuple[float, bool] | None = None  # (monotonic time read, whether the fleet uses them)

    @property
    def celery(self) -> Any:
        """A Celery app on the same broker, built when first asked for (`send_run`, tests, benchmarks).

        Submitting never needs it (the broker message is written directly, claudeq/broker/_message.py), so a
        producer installed without the `worker` extra has no Celery (docs/architecture.md#packaging)."""
        if self._celery is None:
            self._celery = make_celery(self.settings, main="claudeq-producer")
        return self._celery

    def validate(self, spec: JobSpec | dict[str, Any] | None = None, **fields: Any) -> JobSpec:
        """Check a spec without submitting it; JobSpecError names the field and the reason."""
        return validate_spec(spec if spec is not None else fields, self.settings)

    def submit(self, /, spec: JobSpec | dict[str, Any] | None = None, **fields: Any) -> JobHandle:
        """Validate, write the record (`queued`) and enqueue `claudeq.run`. Same idempotency key -> same job.

        One round trip and one atomic step whatever the spec (an idempotency key, `depends_on`, a tenants file):
        `JobStore.submit_call` writes the record (its `submitted` event is made from it) and, for a job it created,
        its index entries, its fair-share tag and its broker message (none for a job waiting for its dependencies).
        Reads before it only to check what the spec names: a session it resumes (one round trip), its dependencies
        (one); and, at most every TENANTS_IN_USE_CHECK_S without a tenants file, whether the fleet uses tenants. Each
        step of the walk: docs/architecture.md#the-submit-walk."""
        checked = self.validate(spec, **fields)
        problems = self._resume_problems([checked]) + self._dependency_problems(checked)
        if problems:
            raise JobSpecError([(field, reason) for _, field, reason in problems])
        record = JobRecord(id=new_job_id(), spec=checked, status="queued", created_at=utcnow())
        if not tracing.enabled():
            return self._submit_one(record)
        with tracing.submit_span(record) as span:
            handle = self._submit_one(record.model_copy(update={"traceparent": span.traceparent()}))
            span.set(created=handle.created)
            return handle

    def _submit_one(self, record: JobRecord) -> JobHandle:
        now = time.time()  # the job's score in `queued` (and its tenant's index) and its message's send time: the same
        submit = self.store.submit_call(record, now, self._broker_message(record, now), self._active_index(record))
        job_id, created = run_call(submit)
        durability.replicated(self.store.redis, self.settings, (job_id,))
        return JobHandle(self, job_id, created)

    def _broker_message(self, record: JobRecord, sent_at: float, backlogged: set[str] | None = None) -> BrokerMessage:
        """The job's broker message (`run_message`; `sent_at` in it: never later than the job's score in `queued`,
        the reconciler relies on it) and, with a tenants file, the same at the broker's last priority step, which
        SUBMIT sends instead when the tenant is backlogged. In a batch (`backlogged`: its chunk's, _backlogged) the
        step is chosen here, once per chunk: a backlogged tenant's messages wait in the broker behind other tenants'
        jobs (their place in the waiting line is still their own priority and fair-share tag)."""
        queue = record.spec.queue or self.settings.queue
        priority = record.spec.priority
        if backlogged is not None:
            if backlogged and self.settings.tenants.governing(record.spec.tenant).name in backlogged:
                priority = BACKLOG_PRIORITY
            return BrokerMessage(list_for(queue, priority), run_message(record.id, queue, priority, sent_at))
        message = BrokerMessage(list_for(queue, priority), run_message(record.id, queue, priority, sent_at))
        if not self.settings.tenants.configured:
            return message
        backlog = run_message(record.id, queue, BACKLOG_PRIORITY, sent_at)
        return message._replace(backlog_list=list_for(queue, BACKLOG_PRIORITY), backlog_message=backlog)

    def _active_index(self, record: JobRecord, indexed: bool | None = None) -> ActiveIndex | None:
        """The active-job index the job goes into (the waiting counts of `claudeq tenants`; None: this producer keeps
        none, see _indexes): its governing tenant's, with a tenants file its weight (its fair-share tag, given in
        submit order: docs/architecture.md#fair-share) and TENANT_BACKLOG."""
        if not (self._indexes() if indexed is None else indexed):
            return None
        tenants = self.settings.tenants
        tenant = tenants.governing(record.spec.tenant)
        if not tenants.configured:
            return ActiveIndex(tenant.name)
        return ActiveIndex(tenant.name, repr(tenant.weight), TENANT_BACKLOG)

    def validate_many(self, specs: Iterable[JobSpec | dict[str, Any]]) -> builtins.list[JobSpec]:
        """Check every spec; BatchSpecError lists each bad one by index, field and reason."""
        checked: builtins.list[JobSpec] = []
        problems: builtins.list[tuple[int, str, str]] = []
        for index, spec in enumerate(specs):
            try:
                checked.append(validate_spec(spec, self.settings))
            except JobSpecError as exc:
                problems += [(index, field, reason) for field, reason in exc.errors]
                continue
            if checked[-1].depends_on:
                problems.append((index, "depends_on", "a job that waits for others is submitted alone (Client.submit)"))
        if problems:
            raise BatchSpecError(problems)
        return checked

    def submit_many(
        self,
        specs: Iterable[JobSpec | dict[str, Any]],
        *,
        chunk_size: int = SUBMIT_CHUNK,
        progress: Callable[[int], None] | None = None,
    ) -> builtins.list[JobHandle]:
        """Submit many jobs, pipelined: one round trip per `chunk_size` jobs, atomic (`JobStore.submit_many_call`:
        the records, and for those created their index entries, fair-share tags and messages), two with a tenants
        file (the tenants' backlogs read first, `_backlogged`), instead of one per job
        (docs/architecture.md#the-submit-walk).

        Validation is all-or-nothing: every spec is checked first, and if any is refused nothing is written and
        BatchSpecError names each bad spec by its index (0-based), field and reason. Then the jobs are written in
        chunks, in order; the handles come back in the order of `specs` (`created` is False where an idempotency
        key matched an existing job, and no message is sent for it). A Redis error mid-way leaves the chunks
        already written submitted (give the specs idempotency keys to make a retry of the whole batch safe).
        `progress(n)` is called after each chunk with the number of jobs submitted so far."""
        checked = self.validate_many(specs)
        problems = self._resume_problems(checked)
        if problems:
            raise BatchSpecError(problems)
        handles: builtins.list[JobHandle] = []
        size = max(1, chunk_size)
        for start in range(0, len(checked), size):
            handles += self._submit_chunk(checked[start : start + size])
            if progress is not None:
                progress(len(handles))
        return handles

    def _dependency_problems(self, spec: JobSpec) -> builtins.list[tuple[int, str, str]]:
        """(0, `depends_on`, reason) for each dependency that is not a job of the spec's tenant (another tenant's job
        is as if missing), or one that already failed or was cancelled when the job would then fail at once. One
        round trip; SUBMIT checks their statuses again, atomically (as CREATE does)."""
        if not spec.depends_on:
            return []
        pipe = self.store.redis.pipeline(transaction=False)
        for dep in spec.depends_on:
            pipe.hmget(self.store.keys.job(dep), ["status", "spec"])
        problems: builtins.list[tuple[int, str, str]] = []
        for dep, (status, raw) in zip(spec.depends_on, pipe.execute(raise_on_error=False), strict=True):
            try:
                tenant = json.loads(raw).get("tenant", DEFAULT_TENANT) if raw else None
            except (ValueError, AttributeError):
                tenant = None
            if status is None or tenant != spec.tenant:
                problems.append((0, "depends_on", f"{dep}: no such job (never submitted, or its retention expired)"))
            elif text(status) in ("failed", "cancelled") and spec.on_dependency_failure == "fail":
                reason = f"{dep}: it {text(status)}: this job would fail at once (on_dependency_failure='run' runs it)"
                problems.append((0, "depends_on", reason))
        return problems

    def _resume_problems(self, specs: builtins.list[JobSpec]) -> builtins.list[tuple[int, str, str]]:
        """(index, `resume`, reason) for each spec resuming a session that is not its tenant's own (sessions are
        their tenant's: ConversationStore.may_resume_call; the worker checks again before the run). One round trip per
        spec with `resume`, none for the others."""
        return [
            (index, "resume", NOT_YOURS.format(session_id=spec.resume, tenant=spec.tenant))
            for index, spec in enumerate(specs)
            if spec.resume and not run_call(self._conversations.may_resume_call(spec.resume, spec.tenant))
        ]

    def _submit_chunk(self, specs: builtins.list[JobSpec]) -> builtins.list[JobHandle]:
        now = utcnow()
        records = [JobRecord(id=new_job_id(), spec=spec, status="queued", created_at=now) for spec in specs]
        if tracing.enabled():
            with tracing.submit_spans(records) as spans:
                traced = [
                    record.model_copy(update={"traceparent": span.traceparent()})
                    for record, span in zip(records, spans, strict=True)
                ]
                return self._write_chunk(traced)
        return self._write_chunk(records)

    def _write_chunk(self, records: builtins.list[JobRecord]) -> builtins.list[JobHandle]:
        sent_at = time.time()  # the jobs' scores in `queued` (and their tenants' indexes), their messages' send time
        backlogged = self._backlogged(records)
        indexed = self._indexes()  # once per chunk: every job of a chunk in its tenant's index, or none
        jobs = [
            (record, self._broker_message(record, sent_at, backlogged), self._active_index(record, indexed))
            for record in records
        ]
        replies = run_call(self.store.submit_many_call(jobs, sent_at))
        durability.replicated(self.store.redis, self.settings, tuple(job_id for job_id, _ in replies))
        return [JobHandle(self, job_id, created) for job_id, created in replies]

    def _indexes(self) -> bool:
        """Whether this producer puts its jobs in their tenants' active-job index: with a tenants file, or in a fleet
        that uses them. The jobs' records say so (`indexed`): their end takes them out of it."""
        return self.settings.tenants.configured or self._fleet_uses_tenants()

    def _fleet_uses_tenants(self) -> bool:
        """Whether a worker with a tenants file has started on this Redis (it sets `tenants_in_use`): a producer
        without the file then still indexes its jobs, under `default`. Read at most every TENANTS_IN_USE_CHECK_S."""
        now = time.monotonic()
        if self._tenants_in_use is None or now - self._tenants_in_use[0] > TENANTS_IN_USE_CHECK_S:
            self._tenants_in_use = (now, bool(self.store.redis.exists(self.store.keys.tenants_in_use)))
        return self._tenants_in_use[1]

    def _backlogged(self, records: builtins.list[JobRecord]) -> set[str]:
        """The tenants of a batch's chunk whose jobs not finished, the chunk's included, exceed TENANT_BACKLOG: the
        chunk's messages of those tenants go to the broker's last priority step (tenants configured; one round trip,
        `JobStore.backlog_call`)."""
        tenants = self.settings.tenants
        if not tenants.configured:
            return set()
        batch: dict[str, int] = {}
        for record in records:
            name = tenants.governing(record.spec.tenant).name
            batch[name] = batch.get(name, 0) + 1
        return run_call(self.store.backlog_call(batch, TENANT_BACKLOG))

    def get(self, job_id: str) -> JobRecord:
        """The job's record; JobNotFound / RecordUnreadable when it cannot be had."""
        return run_call(self.store.get_call(job_id))

    def diff(self, job_id: str) -> WorkspaceChange | None:
        """A coding job's change (its spec's `workspace`): the stat, its branch and commit, and `.patch` against
        `ref` (read from the transcript archive when too large for the record, `patch_archived`; None when too large
        and not archived); None for a job that has none yet (docs/jobs.md#coding-jobs)."""
        change = self.get(job_id).workspace
        if change is None or change.patch_z is not None or not change.patch_archived or self.store.archive is None:
            return change
        stored = self.store.archive.get_patch(self.store.keys.prefix, job_id)
        if stored is None:  # gone with its retention
            return change.model_copy(update={"patch_archived": False})
        return change.model_copy(update={"patch_z": base64.b64encode(stored).decode()})

    def artifact(self, job_id: str, name: str) -> bytes:
        """The bytes of one of the job's artifacts (`get(job_id).artifacts` lists them; docs/jobs.md#artifacts);
        ArtifactNotFound when the job has no artifact of that name (any more)."""
        stored = self.store.redis.hget(self.store.keys.artifacts(job_id), name)
        if stored is None:
            raise ArtifactNotFound(job_id, name)
        return unpack(stored)

    def handle(self, job_id: str) -> JobHandle:
        """A handle for an existing job id."""
        return JobHandle(self, job_id, created=False)

    def list(
        self,
        status: str | None = None,
        limit: int = 50,
        *,
        tenant: str | None = None,
        parent_job_id: str | None = None,
    ) -> list[JobRecord | RecordUnreadable]:
        """Recent jobs, newest first, optionally of one status, of one tenant, submitted by one job (its
        `parent_job_id`). In a fleet that uses tenants a tenant's jobs are read from its own index
        (`Keys.tenant_index`), exact whatever other tenants submit; a fleet without tenants keeps none, and its
        jobs (nearly all `default`'s) are read from the fleet's. A parent's children are read from the entries
        created since the parent (when its record is still there)."""
        index = None
        if tenant is not None and self._indexes():
            index = self.store.keys.tenant_index(tenant)
        since_ms = None
        if parent_job_id is not None:
            try:
                since_ms = int(run_call(self.store.get_call(parent_job_id)).created_at.timestamp() * 1000)
            except ClaudeqError:
                since_ms = None  # an expired (or unreadable) parent: its children may still be retained
        return self.store.list_jobs(
            status, limit, index=index, tenant=tenant, parent_job_id=parent_job_id, since_ms=since_ms
        )

    def cancel(self, job_id: str, reason: str = "cancelled by request") -> str:
        """Cancel a job. -> `cancelled` (was waiting), `running` (the worker stops it within a second), or the
        terminal status it already had. JobNotFound when there is no such job."""
        result = self.store.cancel(job_id, reason)
        if result == "missing":
            from claudeq.errors import JobNotFound

            raise JobNotFound(job_id)
        if result == "cancelled":
            try:
                tenant = run_call(self.store.get_call(job_id)).spec.tenant
            except ClaudeqError:
                return result
            run_call(TenantStore(self.store.redis, self.store.keys, self.settings.tenants).unindex_call(tenant, job_id))
        return result

    def approve(
        self,
        job_id: str,
        approve: bool = True,
        reason: str | None = None,
        *,
        request_id: str | None = None,
        tenant: str | None = None,
    ) -> PendingApproval:
        """Answer the job's pending approval request (docs/jobs.md#tool-approval): approve it, or deny it with
        `reason` (the model is told). As the operator, or as `tenant` (then only that tenant's jobs). -> the
        request with its decision; ApprovalRefused (`why`: answered before, nothing pending, another tenant's, …)."""
        return approval_store.decide(
            self.store, job_id, approve=approve, reason=reason, request_id=request_id, tenant=tenant
        )

    def approvals(self, tenant: str | None = None) -> builtins.list[JobRecord]:
        """The jobs waiting for an approval now (of `tenant`'s only, when given); each record's `approval`."""
        return approval_store.waiting(self.store, tenant)

    def events(self, job_id: str, follow: bool = False) -> Iterator[Event]:
        """The job's events; with `follow`, keep yielding until the job is finished (with `redis_wait_replicas`, its
        end event only once that many replicas hold it, as `wait` reports it)."""
        if follow:
            yield from blocking(self._events(job_id, follow=True))
            return
        for _, event in self.store.read_events(job_id):
            yield event

    async def _events(self, job_id: str, follow: bool = False) -> AsyncIterator[Event]:
        """`events` on an event loop (`AsyncClient.events`; `events` drives it to follow): claudeq/follow.py's loop."""
        if not follow:
            for _, event in await asyncio.to_thread(self.store.read_events, job_id):
                yield event
            return
        async for item in follow_job(self.store, job_id, keepalive_s=None):
            if isinstance(item, tuple):
                if item[1].type in TERMINAL:
                    await asyncio.to_thread(self.until_replicated, job_id)
                yield item[1]

    def transcript(self, job_id: str) -> builtins.list[tuple[str, builtins.list[dict[str, Any]]]]:
        """The transcripts of the sessions a job's runs worked in, oldest first: (session id, its main transcript's
        entries as the CLI wrote them). Read from Redis and the transcript archive alike; a session no longer kept
        (its retention ended, or a one-shot job's dropped at success) is left out. JobNotFound when the job is
        unknown."""
        run_call(self.store.get_call(job_id))
        sessions: builtins.list[str] = []
        for event in self.events(job_id):
            sid = session_of(event)
            if sid and sid not in sessions:
                sessions.append(sid)
        return asyncio.run(self._load_transcripts(sessions)) if sessions else []

    async def _load_transcripts(self, sessions: builtins.list[str]) -> builtins.list[tuple[str, builtins.list[Any]]]:
        from claudeq.transcripts import RedisSessionStore

        store = RedisSessionStore.from_settings(self.settings)
        try:
            out: builtins.list[tuple[str, builtins.list[Any]]] = []
            for sid in sessions:
                for project_key in await store.projects_of(sid):
                    entries = await store.load({"project_key": project_key, "session_id": sid})
                    if entries:
                        out.append((sid, [dict(e) for e in entries]))
                        break
            return out
        finally:
            await store.aclose()

    # ---- end notifications (worker/background/notifier.py, docs/notifications.md) ----------------------------

    def dead_notifications(self, limit: int = 100) -> builtins.list[JobRecord | RecordUnreadable]:
        """The jobs with a notification given up on (a webhook that kept failing), most recent first."""
        ids = [text(i) for i in self.store.redis.zrevrange(self.store.keys.outbox_dead, 0, limit - 1)]
        return [r for r in run_call(self.store.records_call(ids)) if r is not None]

    def retry_notifications(self, job_id: str) -> int:
        """Try a job's dead notifications again (from the first try on), at once; -> how many. JobNotFound when the
        job's record is gone."""
        from claudeq.errors import JobNotFound

        keys = self.store.keys
        args = job_scripts.RetryNotificationsArgs(
            job=keys.job(job_id), outbox=keys.outbox, outbox_dead=keys.outbox_dead, job_id=job_id, now_s=time.time()
        )
        again = int(self._retry_script(args.keys(), args.argv()))
        if again < 0:
            raise JobNotFound(job_id)
        return again

    @functools.cached_property
    def _retry_script(self) -> Any:
        return self.store.redis.register_script(job_scripts.RETRY_NOTIFICATIONS)

    # ---- schedules (claudeq/schedules.py) -------------------------------------------------------------------

    @functools.cached_property
    def _schedules(self) -> ScheduleStore:
        return ScheduleStore(self.store.redis, self.store.keys)

    def add_schedule(
        self,
        name: str,
        spec: JobSpec | dict[str, Any] | None = None,
        *,
        cron: str | None = None,
        every_s: int | None = None,
        tz: str = "UTC",
        on_missed: str = "skip",
        misfire_grace_s: float = 60.0,
        replace: bool = False,
        **fields: Any,
    ) -> Schedule:
        """Submit `spec` on a cron expression (read in `tz`) or every `every_s` seconds, fired by the workers exactly
        once per tick. The spec is checked as submit checks it; JobSpecError names the field and the reason (a
        schedule's own fields too). A name is its tenant's (`spec.tenant`); an existing one is an error unless
        `replace`."""
        checked = self.validate(spec, **fields)
        schedule = schedule_from(
            name, checked, cron=cron, every_s=every_s, tz=tz, on_missed=on_missed, misfire_grace_s=misfire_grace_s
        )
        self._schedule_limits(schedule)
        return self._schedules.add(schedule, replace=replace)

    def _schedule_limits(self, schedule: Schedule) -> None:
        """One tenant's schedules are bounded in number and in how often they fire together (their jobs go through
        the same fleet as everyone's): JobSpecError past either."""
        others = [
            i.schedule
            for i in self._schedules.list(schedule.tenant)
            if i.schedule.name != schedule.name and not i.schedule.paused
        ]
        if len(others) >= self.settings.max_schedules_per_tenant:
            limit = self.settings.max_schedules_per_tenant
            raise JobSpecError([("name", f"tenant {schedule.tenant!r} has {limit} schedules, the most it may have")])
        now = time.time()
        rate = schedule.fires_per_hour(now) + sum(_rate_or_zero(other, now) for other in others)
        if round(rate, 3) > self.settings.max_schedule_fires_per_hour:  # float sums: a hair over is not over
            field = "cron" if schedule.cron is not None else "every_s"
            limit = self.settings.max_schedule_fires_per_hour
            owner = schedule.tenant
            reason = f"tenant {owner!r}'s schedules would fire {rate:.0f} times an hour; the limit is {limit}"
            raise JobSpecError([(field, reason)])

    def schedules(self, tenant: str | None = None) -> builtins.list[ScheduleInfo]:
        """Every schedule (of one tenant, if given) with its next tick and what it fired."""
        return self._schedules.list(tenant)

    def pause_schedule(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        """Stop firing until resumed (ScheduleNotFound when there is none)."""
        self._schedules.pause(name, tenant)

    def resume_schedule(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        """Fire again from the next tick after now; ticks while paused are not made up."""
        self._schedules.resume(name, tenant)

    def remove_schedule(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        """Delete a schedule (jobs it fired stay)."""
        self._schedules.remove(name, tenant)

    def wait(self, job_id: str, timeout: float | None = None, poll_s: float = 0.2) -> JobRecord:
        """Block until the job is finished and return its record (with `redis_wait_replicas`, once that many
        replicas hold its end: a failover cannot take back an end this returned)."""
        for pause in _pauses(job_id, timeout, poll_s):
            time.sleep(pause)
            record = self.finished(job_id)
            if record is not None:
                return record
        raise AssertionError("unreachable: _pauses ends by raising JobTimeout")

    async def _wait(self, job_id: str, timeout: float | None = None, poll_s: float = 0.2) -> JobRecord:  # noqa: ASYNC109
        """`wait` on an event loop (`AsyncClient.wait`): the same reads of `finished` between the same pauses."""
        for pause in _pauses(job_id, timeout, poll_s):
            await asyncio.sleep(pause)
            record = await asyncio.to_thread(self.finished, job_id)
            if record is not None:
                return record
        raise AssertionError("unreachable: _pauses ends by raising JobTimeout")

    def until_replicated(self, job_id: str) -> None:
        """Block until `redis_wait_replicas` replicas hold what this process read of the job (free when 0)."""
        while True:
            try:
                durability.replicated(self.store.redis, self.settings, (job_id,))
                return
            except NotReplicated:
                continue  # each try waited `redis_wait_timeout_ms`

    def finished(self, job_id: str) -> JobRecord | None:
        """The job's record if it is finished, else None; with `redis_wait_replicas`, None too until that many
        replicas hold the record as read (docs/failover.md#durability). JobNotFound for an unknown job."""
        status = run_call(self.store.status_call(job_id))
        if status is not None and status not in TERMINAL:
            return None
        record = self.get(job_id)
        if self.settings.redis_wait_replicas and record.status in TERMINAL:
            try:
                durability.replicated(self.store.redis, self.settings, (job_id,))
            except NotReplicated:
                return None
        return record

    def live_workers(self, queue: str | None = None) -> builtins.list[str]:
        """Ids of workers whose heartbeat is fresh (their `worker:{id}` hash has not expired), optionally only
        those consuming `queue`."""
        keys = self.store.keys
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in self.store.redis.zrange(keys.workers, 0, -1)]
        if not ids:
            return []
        pipe = self.store.redis.pipeline(transaction=False)
        for worker_id in ids:
            pipe.hget(keys.worker(worker_id), "queues")
        live: builtins.list[str] = []
        for worker_id, queues in zip(ids, pipe.execute(), strict=True):
            if queues is None:
                continue
            names = (queues.decode() if isinstance(queues, bytes) else str(queues)).split(",")
            if queue is None or queue in names:
                live.append(worker_id)
        return live

    def close(self) -> None:
        """Release connections."""
        self.store.redis.close()


P = ParamSpec("P")
R = TypeVar("R")


def _in_thread(
    op: Callable[Concatenate[Client, P], R],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """`Client`'s operation `op` as AsyncClient's: the sync client's own (a subclass's override too), in a thread."""

    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        method: Callable[P, R] = getattr(self.sync, op.__name__)
        return await asyncio.to_thread(method, *args, **kwargs)

    functools.update_wrapper(run, op)
    return run


def _handed(
    op: Callable[Concatenate[Client, P], JobHandle],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, AsyncJobHandle]]:
    """`_in_thread`, for an operation that hands out a job: its handle is an AsyncJobHandle."""
    threaded = _in_thread(op)

    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncJobHandle:
        handle = await threaded(self, *args, **kwargs)
        return AsyncJobHandle(self, handle.id, handle.created)

    functools.update_wrapper(run, op)
    return run


def _all_handed(
    op: Callable[Concatenate[Client, P], builtins.list[JobHandle]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, builtins.list[AsyncJobHandle]]]:
    """`_handed`, for an operation that hands out many jobs."""
    threaded = _in_thread(op)

    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> builtins.list[AsyncJobHandle]:
        return [AsyncJobHandle(self, h.id, h.created) for h in await threaded(self, *args, **kwargs)]

    functools.update_wrapper(run, op)
    return run


def _on_loop(
    op: Callable[Concatenate[Client, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """`Client`'s coroutine `op` (what its blocking method drives) as AsyncClient's, on the caller's loop."""

    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        method: Callable[P, Coroutine[Any, Any, R]] = getattr(self.sync, op.__name__)
        return await method(*args, **kwargs)

    functools.update_wrapper(run, op)
    return run


def _streamed(
    op: Callable[Concatenate[Client, P], AsyncIterator[R]],
) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[R]]:
    """`Client`'s async iterator `op` (what its blocking method drives) as AsyncClient's, on the caller's loop."""

    def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R]:
        method: Callable[P, AsyncIterator[R]] = getattr(self.sync, op.__name__)
        return method(*args, **kwargs)

    functools.update_wrapper(run, op)
    return run


class AsyncClient:
    """The same API for asyncio code. Each operation is `Client`'s, run in a thread (Redis calls take well under a
    millisecond); `wait` and `events` are the loops `Client` drives, run on the caller's loop."""

    def __init__(self, settings: Settings | None = None, *, client: Client | None = None) -> None:
        self.sync = client or Client(settings)

    def handle(self, job_id: str) -> AsyncJobHandle:
        """A handle for an existing job id."""
        return AsyncJobHandle(self, job_id, created=False)

    submit = _handed(Client.submit)
    submit_many = _all_handed(Client.submit_many)
    get = _in_thread(Client.get)
    diff = _in_thread(Client.diff)
    artifact = _in_thread(Client.artifact)
    list = _in_thread(Client.list)
    cancel = _in_thread(Client.cancel)
    approve = _in_thread(Client.approve)
    approvals = _in_thread(Client.approvals)
    wait = _on_loop(Client._wait)
    events = _streamed(Client._events)


class AsyncJobHandle:
    """A submitted job, for asyncio code: `await handle.wait()`, `await handle.record()`, `async for e in …`."""

    def __init__(self, client: AsyncClient, job_id: str, created: bool = True) -> None:
        self.client = client
        self.id = job_id
        self.created = created

    def __repr__(self) -> str:
        return f"AsyncJobHandle({self.id!r})"

    async def record(self) -> JobRecord:
        """The job's current record."""
        return await self.client.get(self.id)

    async def wait(self, timeout: float | None = None, poll_s: float = 0.2) -> JobRecord:  # noqa: ASYNC109
        """Wait (without blocking the loop) until the job is finished; JobTimeout after `timeout` seconds."""
        return await self.client.wait(self.id, timeout=timeout, poll_s=poll_s)

    async def cancel(self) -> str:
        """Cancel the job (see Client.cancel)."""
        return await self.client.cancel(self.id)

    def events(self, follow: bool = False) -> AsyncIterator[Event]:
        """The job's events (see Client.events)."""
        return self.client.events(self.id, follow=follow)
