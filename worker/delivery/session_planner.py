"""Session planning: which session each attempt starts from, the conversation turn lock, and what a turn leaves.

The engine calls `plan()` before each attempt (before leasing an account slot) and `finished()` when a job reaches
a terminal status. Per attempt, in order:

1. A conversation turn takes the conversation's turn lock; while another turn of it is active (or an earlier-
   submitted one has not run yet) the plan says *wait*: the engine defers the job and `finished()` of the running
   turn names it for promotion.
2. A retry (any earlier attempt: transient, timeout, requeued, worker lost) whose session already holds this job's
   prompt and the model's answer to it *continues* that session: resume it at its last real message and send
   `CONTINUE_PROMPT` instead of the prompt, so the prompt is in every request exactly once and any tool work done is
   kept. When the prompt got no answer at all, the turn is *retaken*: a fresh session, or the resumed session again
   from the entry the first attempt started at, with the original prompt.
3. Otherwise: a conversation resumes its latest session (fork=True branches it: the pointer does not move), an
   explicit `resume` resumes that session, anything else starts fresh. A session that exists nowhere fails the job
   (kind `input`) or, with `on_missing_session="restart"`, starts a fresh session and says so (event
   `session_restarted`, and the conversation turn is marked `restarted`).

Every run gets the RedisSessionStore, so its transcript is mirrored and any worker can resume it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis

from claudeq.conversations import NOT_YOURS, ConversationStore, Turn
from claudeq.events import SessionPlanned, SessionRestarted, session_of
from claudeq.models import JobError, JobRecord, JobSpec, PlannedSession, SessionMode, utcnow
from claudeq.transcripts import RedisSessionStore

from ...config.settings import Settings
from ...config.tenants import DEFAULT_TENANT
from ..redaction import redact
from ..run.outcome import EventSink
from ..run.workdirs import default_cwd, project_key_for_directory, runs_under_own_uid
from ..store.job_store import WorkerJobStore

log = logging.getLogger(__name__)

#: What a continuing retry sends instead of the job's prompt (the prompt is already in the session).
CONTINUE_PROMPT = "Continue from where you left off."
#: A waiting turn is re-checked this often even if nobody promotes it (a lost wake-up must not strand it).
TURN_RECHECK_S = 30.0


@dataclass(frozen=True)
class TurnWait:
    """Another turn of the conversation comes first: defer until it ends."""

    holder: str | None
    ready_at: datetime
    reason: str


@dataclass(frozen=True)
class SessionPlan:
    """How an attempt starts: the RunRequest's session fields, or a wait, or an error."""

    resume: str | None = None
    fork: bool = False
    resume_at: str | None = None
    session_store: RedisSessionStore | None = None
    prompt: str | None = None  # send this instead of the spec's prompt (a continuing retry)
    mode: SessionMode = "new"
    wait: TurnWait | None = None
    error: JobError | None = None
    base: str | None = None  # the entry of the resumed session the job's first attempt began at
    restarted_from: str | None = None  # the missing session a `restart` replaced

    def stored(self) -> PlannedSession:
        """What the job record keeps of its first plan (the engine writes it, fenced, with the attempt)."""
        return PlannedSession(
            mode=self.mode, resume=self.resume, fork=self.fork, base=self.base, restarted_from=self.restarted_from
        )


# ---- transcripts (pure) ----------------------------------------------------------------------------------------


def is_real_message(entry: dict[str, Any]) -> bool:
    """A user/assistant transcript entry the model saw or said (not an API-error placeholder, not metadata)."""
    if entry.get("type") not in ("user", "assistant") or not entry.get("uuid"):
        return False
    message = entry.get("message")
    if not isinstance(message, dict):
        return False
    return not (entry.get("isApiErrorMessage") or message.get("model") == "<synthetic>")


def user_text(entry: dict[str, Any]) -> str | None:
    """The text a user entry carries (None for tool results and non-user entries)."""
    if entry.get("type") != "user" or not isinstance(entry.get("message"), dict):
        return None
    content = entry["message"].get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def last_real_uuid(entries: list[dict[str, Any]]) -> str | None:
    """The uuid of the last real message, the point a resume continues from."""
    real = [e for e in entries if is_real_message(e)]
    return str(real[-1]["uuid"]) if real else None


@dataclass(frozen=True)
class Continuation:
    """Where a retry picks up its own session."""

    resume_at: str  # the last real message (the prompt itself when nothing came after it)
    progressed: bool  # the model answered (text or tool use) after the prompt


def find_continuation(entries: list[dict[str, Any]], prompt: str, base: str | None) -> Continuation | None:
    """Locate this job's prompt in its session (after `base`, the entry the first attempt resumed from) and the
    point to continue from; None when the prompt never reached the transcript."""
    start = 0
    if base is not None:
        for i, entry in enumerate(entries):
            if entry.get("uuid") == base:
                start = i + 1
                break
    wanted = prompt.strip()
    prompt_at = next(
        (
            i
            for i in range(start, len(entries))
            if is_real_message(entries[i]) and (user_text(entries[i]) or "").strip() == wanted
        ),
        None,
    )
    if prompt_at is None:
        return None
    after = entries[prompt_at:]
    resume_at = last_real_uuid(after)
    assert resume_at is not None  # the prompt entry itself is real
    progressed = any(is_real_message(e) and e.get("type") == "assistant" for e in after)
    return Continuation(resume_at, progressed)


# ---- the planner -----------------------------------------------------------------------------------------------


class SessionPlanner:
    """Decides the session of each attempt; holds the conversation turn lock. Without settings it does nothing
    (engine unit tests): every attempt starts a fresh, unmirrored session."""

    def __init__(
        self,
        settings: Settings | None = None,
        jobs: WorkerJobStore | None = None,
        *,
        store: RedisSessionStore | None = None,
        conversations: ConversationStore | None = None,
        recheck_s: float = TURN_RECHECK_S,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self._store = store
        self.conversations = conversations
        if conversations is None and settings is not None and jobs is not None:
            self.conversations = ConversationStore(jobs.redis, jobs.keys, settings.session_retention_s)
        self.recheck_s = recheck_s
        #: Per tool selection (a profile name, or the tuple of tools): whether its runs get a uid of their own. The
        #: policy is fixed for the planner's life; a selection the policy refuses is not cached (it raises each time).
        self._own_uid: dict[str | tuple[str, ...], bool] = {}
        #: The project key of the default cwd, per own-uid flag: that directory never moves, and its key costs a
        #: realpath (a syscall per path component) on the engine loop.
        self._default_project: dict[bool, str] = {}

    def _project(self, spec: JobSpec) -> str:
        """The session-store project key of the directory the spec's runs work in."""
        assert self.settings is not None
        tools = spec.tools if isinstance(spec.tools, str) else tuple(spec.tools)
        own_uid = self._own_uid.get(tools)
        if own_uid is None:
            own_uid = self._own_uid[tools] = runs_under_own_uid(spec, self.settings.policy)
        if spec.cwd:
            return project_key_for_directory(spec.cwd)
        project = self._default_project.get(own_uid)
        if project is None:
            project = self._default_project[own_uid] = project_key_for_directory(default_cwd(own_uid))
        return project

    @property
    def enabled(self) -> bool:
        """Whether sessions are mirrored and planned (settings and a job store were given)."""
        return self.settings is not None and self.jobs is not None

    def store(self) -> RedisSessionStore:
        """The session store, created on first use on the calling (engine) loop: redis.asyncio binds to it."""
        if self._store is None:
            assert self.settings is not None
            self._store = RedisSessionStore.from_settings(self.settings, scrub=redact)
        return self._store

    async def plan(self, record: JobRecord, emit: EventSink | None = None) -> SessionPlan:
        """The session of the next attempt of `record` (or a wait, or an error)."""
        if not self.enabled:
            return SessionPlan()
        spec = record.spec
        if spec.conversation:
            assert self.conversations is not None and self.jobs is not None
            grant = await self.jobs.send(self.conversations.acquire_call(spec.conversation, record.id, spec.tenant))
            if not grant.granted:
                reason = f"waiting for turn {grant.holder} of conversation {spec.conversation!r}"
                ready = utcnow() + timedelta(seconds=self.recheck_s)
                return SessionPlan(wait=TurnWait(grant.holder, ready, reason))
        store = self.store()
        project = self._project(spec)
        # A job that never started a run (no attempt recorded: the attempt is written before its run starts) has no
        # session to continue: no need to read its events.
        plan = await self._continuation(record, store, project) if record.attempts else None
        if plan is None:
            plan = await self._base_plan(record, store, project)
        if emit is not None:
            if plan.restarted_from is not None:
                await emit(SessionRestarted(missing_session_id=plan.restarted_from).event())
            if plan.error is None:
                planned = SessionPlanned(
                    mode=plan.mode, resume=plan.resume, fork=plan.fork, resume_at=plan.resume_at, base=plan.base
                )
                await emit(planned.event())
        return plan

    async def _continuation(self, record: JobRecord, store: RedisSessionStore, project: str) -> SessionPlan | None:
        """A retry whose own session already holds the prompt continues it; None otherwise.

        Earlier attempts are known from the job's event stream (a `session` event per run), not from the record:
        a worker that died mid-run never wrote its attempt, but its events are there. Where the first attempt began
        (`base`) is in the record's `session_plan`.
        """
        session_id, base = await self._previous_session(record)
        if session_id is None:
            return None
        if not await self._present(store, session_id, project):
            return None
        entries = await store.load({"project_key": project, "session_id": session_id}) or []
        found = find_continuation([dict(e) for e in entries], record.spec.prompt, base)
        if found is None:
            return None
        if not found.progressed:
            # Nothing was answered (e.g. the first request failed): take the turn again from where the first attempt
            # began, with the original prompt. Continuing here would append CONTINUE_PROMPT to the unanswered prompt
            # (the CLI merges consecutive user text), growing it on every retry.
            if base is None:
                return None  # the first attempt started fresh: so does this one
            return SessionPlan(resume=session_id, resume_at=base, session_store=store, mode="retake", base=base)
        return SessionPlan(
            resume=session_id,
            resume_at=found.resume_at,
            session_store=store,
            prompt=CONTINUE_PROMPT,
            mode="continue",
            base=base,
        )

    async def _previous_session(self, record: JobRecord) -> tuple[str | None, str | None]:
        """(the session the job's last attempt ran in, the entry its first attempt resumed from). The session comes
        from the job's `session` events (the record's when none is left); the base from the record's first plan."""
        assert self.jobs is not None
        session_id: str | None = None
        first: dict[str, Any] | None = None
        after = "0-0"
        while True:
            batch = await self.jobs.reads.events(record.id, after=after, count=500)
            for entry_id, event in batch:
                after = entry_id
                if session := session_of(event):
                    session_id = session
                elif event.type == "session_plan" and first is None:
                    first = event.data
            if len(batch) < 500:
                break
        legacy = first.get("base") if first else None  # a job planned before plans were kept in the record
        base = record.session_plan.base if record.session_plan is not None else legacy
        return session_id or record.session_id, base

    async def _base_plan(self, record: JobRecord, store: RedisSessionStore, project: str) -> SessionPlan:
        """The plan of a first try, with the entry it resumes from (`base`) and the missing session it replaces
        (`restarted_from`, a restart), built once (no copy per job)."""
        spec = record.spec
        target = spec.resume
        assert self.conversations is not None and self.jobs is not None
        if spec.conversation:
            target = await self.jobs.send(self.conversations.latest_session_call(spec.conversation, spec.tenant))
        if target is None:
            return SessionPlan(session_store=store, mode="new")
        # Sessions are their tenant's own: checked before anything is read or copied, let alone sent to the model.
        if not await self.jobs.send(self.conversations.may_resume_call(target, spec.tenant)):
            message = "resume: " + NOT_YOURS.format(session_id=target, tenant=spec.tenant)
            return SessionPlan(error=JobError(kind="input", message=message))
        if not await self._present(store, target, project):
            if spec.on_missing_session == "restart":
                return SessionPlan(session_store=store, mode="restart", restarted_from=target)
            what = f"conversation {spec.conversation!r}'s session" if spec.conversation else "session"
            message = (
                f"{what} {target} not found (expired or deleted); "
                "submit with on_missing_session='restart' to start a new session instead"
            )
            return SessionPlan(error=JobError(kind="input", message=message))
        entries = await store.load({"project_key": project, "session_id": target}) or []
        base = last_real_uuid([dict(e) for e in entries])
        mode: SessionMode = "fork" if spec.fork else "resume"
        return SessionPlan(resume=target, fork=spec.fork, session_store=store, mode=mode, base=base)

    @staticmethod
    async def _present(store: RedisSessionStore, session_id: str, project: str) -> bool:
        """Whether the session is stored under `project` (copied there if another project key holds it)."""
        projects = await store.projects_of(session_id)
        if project in projects:
            return True
        if projects:
            return await store.copy_session(session_id, projects[0], project) > 0
        return False

    async def claim(self, tenant: str, session_id: str) -> None:
        """A run of `tenant` reported its session: the session is the tenant's (ConversationStore.claim_session).
        A failure is logged: the session is then the default tenant's, which the tenant's own jobs cannot resume
        (it fails closed)."""
        if not self.enabled or tenant == DEFAULT_TENANT:
            return
        assert self.conversations is not None and self.jobs is not None
        try:
            await self.jobs.send(self.conversations.claim_session_call(session_id, tenant))
        except redis.RedisError:
            log.warning("session %s: could not record it as tenant %s's", session_id, tenant)

    async def recheck(self, record: JobRecord) -> bool:
        """After deferring a waiting turn: True if the turn became ours meanwhile (the engine promotes it now)."""
        if not self.enabled or not record.spec.conversation:
            return False
        assert self.conversations is not None and self.jobs is not None
        spec = record.spec
        assert spec.conversation is not None
        grant = await self.jobs.send(self.conversations.acquire_call(spec.conversation, record.id, spec.tenant))
        return grant.granted

    async def finished(self, record: JobRecord, status: str, session_id: str | None) -> list[str]:
        """A job reached `status`: record the conversation turn, move the pointer (success, not a fork), free the
        turn lock. -> job ids of waiting turns to promote now. A one-shot job's transcript gets the one-shot
        retention on success (`oneshot_session_ttl_s`)."""
        if not self.enabled:
            return []
        if not record.spec.conversation:
            if status == "succeeded" and session_id:
                await self._retain_oneshot(record, session_id)
            return []
        assert self.conversations is not None
        return await self._finish_turn(record, status, session_id)

    async def _retain_oneshot(self, record: JobRecord, session_id: str) -> None:
        """A succeeded job that started a new session outside a conversation: nothing of claudeq resumes it any more
        (its retries are over), so its transcripts — the last attempt's and any earlier attempt's session (a retry
        that started afresh) — are kept `oneshot_session_ttl_s` (0: deleted now) if that is set. A failure is
        logged: the transcripts then keep the session retention."""
        assert self.settings is not None
        ttl = self.settings.oneshot_session_ttl_s
        plan = record.session_plan
        if ttl is None or ttl >= self.settings.session_retention_s or plan is None or plan.mode != "new":
            return
        try:
            sessions = {session_id, *await self._sessions_of(record.id)}
            for sid in sorted(sessions):
                await self.store().retain(sid, ttl)
        except redis.RedisError:
            log.warning("session %s: could not apply the one-shot transcript retention", session_id)

    async def _sessions_of(self, job_id: str) -> set[str]:
        """Every session the job's runs reported (their `session` events)."""
        assert self.jobs is not None
        found: set[str] = set()
        after = "0-0"
        while True:
            batch = await self.jobs.reads.events(job_id, after=after, count=500)
            for entry_id, event in batch:
                after = entry_id
                if session := session_of(event):
                    found.add(session)
            if len(batch) < 500:
                return found

    async def _finish_turn(self, record: JobRecord, status: str, session_id: str | None) -> list[str]:
        assert self.conversations is not None and self.jobs is not None
        name = record.spec.conversation
        assert name is not None
        first = record.session_plan or await self._first_plan(record.id)
        if first is not None or status == "succeeded":
            mode = first.mode if first else None
            turn = Turn(
                job_id=record.id,
                status=status,
                session_id=session_id,
                resumed_from=first.resume if first else None,
                forked=mode == "fork",
                restarted=mode == "restart",
                started_at=record.started_at,
                finished_at=utcnow(),
            )
            move = status == "succeeded" and mode != "fork"
            await self.jobs.send(self.conversations.record_turn_call(name, turn, move, tenant=record.spec.tenant))
        nxt = await self.jobs.send(self.conversations.release_call(name, record.id, record.spec.tenant))
        return [nxt] if nxt else []

    async def _first_plan(self, job_id: str) -> PlannedSession | None:
        """The first `session_plan` event of a job planned before plans were kept in the record (if not trimmed)."""
        assert self.jobs is not None
        for _, event in await self.jobs.reads.events(job_id, count=500):
            if event.type == "session_plan":
                return PlannedSession.model_validate(event.data)
        return None

    async def aclose(self) -> None:
        """Close the session store's connections."""
        if self._store is not None:
            await self._store.aclose()
