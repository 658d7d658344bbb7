"""Conversations: a name -> its latest session id, its turns, and a turn lock so turns never overlap.

See docs/architecture.md#sessions-and-conversations.

A conversation is its tenant's own (`JobSpec.tenant`): every key below is in the tenant's scope (`Keys.scope`; the
default tenant's keys are named as in a fleet without tenants), so another tenant naming the same conversation
reaches none of them. Every method takes the tenant (default: `default`).

Redis (sync redis-py, like JobStore): `conv:{name}` the latest session id, `conv-turns:{name}` the finished turns,
`conv-lock:{name}` the job running the current turn, `conv-waiters:{name}` the active turns not running, scored by
turn number, and `conv-seq:{name}` the last turn number. A turn is numbered when its job is created (the CREATE
script, claudeq/jobs/_scripts.py), so the order is the order of submit whatever the backlog; the lock decides from
the front of that order with a fixed number of O(log n) commands. Every key expires `ttl_s` after the conversation's
last submit or turn. The lock is never trusted blindly: a holder
that is no longer active (finished, or its record expired) is stale and the next turn takes over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel

from claudeq import connections
from claudeq.config.settings import Settings
from claudeq.config.tenants import DEFAULT_TENANT
from claudeq.keys import Keys, text
from claudeq.lua import script
from claudeq.models import ACTIVE, Timestamp
from claudeq.script_args import ScriptArgs, key
from claudeq.script_calls import PipeCall, ScriptCall, done, run_call

#: Why a job may not resume a session (the field is `resume`; the text names no other tenant nor any job).
NOT_YOURS = "session {session_id} is not one of tenant {tenant!r}'s sessions"

if TYPE_CHECKING:  # the transcript store is the SDK's SessionStore: a producer never loads it
    from claudeq.transcripts import RedisSessionStore

#: The turn lock (the text and its KEYS, ARGV and answer: claudeq/lua/conversation/, docs/architecture.md#lua-scripts):
#: acquire, release, and number a turn that has no number yet.
ACQUIRE = script("conversation/acquire.lua")
RELEASE = script("conversation/release.lua")
REGISTER = script("conversation/register.lua")


@dataclass(frozen=True, kw_only=True)
class AcquireArgs(ScriptArgs):
    """ACQUIRE's arguments (claudeq/script_args.py)."""

    SCRIPT = "conversation/acquire.lua"
    lock: str = key()
    waiters: str = key()
    seq: str = key()
    job: str = key()
    job_id: str
    unused: str
    job_key_prefix: str
    ttl: int
    pops: int


@dataclass(frozen=True, kw_only=True)
class ReleaseArgs(ScriptArgs):
    """RELEASE's arguments."""

    SCRIPT = "conversation/release.lua"
    lock: str = key()
    waiters: str = key()
    job_id: str
    pops: int
    job_key_prefix: str


@dataclass(frozen=True, kw_only=True)
class RegisterArgs(ScriptArgs):
    """REGISTER's arguments."""

    SCRIPT = "conversation/register.lua"
    job: str = key()
    waiters: str = key()
    seq: str = key()
    job_id: str
    ttl: int


#: Finished turns one acquire or release removes from the front of the order, at most.
HEAD_POPS = 50

#: Turns kept in a conversation's history (`claudeq conversation show`); older ones are dropped.
TURNS_KEPT = 1000


class Turn(BaseModel):
    """One finished turn of a conversation."""

    job_id: str
    status: str  # the job's terminal status
    session_id: str | None = None  # the session the turn ended in
    resumed_from: str | None = None  # the session it continued (None: it started the conversation)
    forked: bool = False  # branched into a new session; the conversation's pointer did not move
    restarted: bool = False  # its session had expired and on_missing_session="restart" began a fresh one
    started_at: Timestamp | None = None
    finished_at: Timestamp


@dataclass(frozen=True)
class TurnGrant:
    """The answer of `acquire`: run now, or wait for `holder` (the running turn, or an earlier queued one)."""

    granted: bool
    holder: str | None


@dataclass
class ConversationInfo:
    """What `claudeq conversation show` prints."""

    name: str
    session_id: str | None
    turns: list[Turn] = field(default_factory=list)
    running: str | None = None
    waiting: list[str] = field(default_factory=list)

    def public(self) -> dict[str, object]:
        """The JSON form of `claudeq conversation show --json`."""
        return {
            "name": self.name,
            "session_id": self.session_id,
            "running": self.running,
            "waiting": self.waiting,
            "turns": [t.model_dump(mode="json") for t in self.turns],
        }


class ConversationStore:
    """Pointer, turns and turn lock of conversations. An operation that the worker makes too is a call (`*_call`,
    claudeq/script_calls.py): sent with `run_call`, or from the worker's event loop with `AsyncCalls.send`."""

    def __init__(self, client: redis.Redis, keys: Keys, ttl_s: int) -> None:
        self.redis = client
        self.keys = keys
        self.ttl_s = ttl_s
        self._acquire = client.register_script(ACQUIRE)
        self._release = client.register_script(RELEASE)
        self._register = client.register_script(REGISTER)

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis | None = None) -> ConversationStore:
        """A store under the settings' prefix, keeping conversations as long as their transcripts."""
        return cls(client or connections.sync_client(settings), Keys(settings.key_prefix), settings.session_retention_s)

    def latest_session_call(self, name: str, tenant: str = DEFAULT_TENANT) -> PipeCall[str | None]:
        """The conversation's latest session id (None: no successful turn yet, or it expired)."""
        key = self.keys.conversation(name, tenant)
        return PipeCall(
            self.redis, lambda p: p.get(key), lambda replies: None if replies[0] is None else text(replies[0])
        )

    def register(self, name: str, job_id: str, tenant: str = DEFAULT_TENANT) -> None:
        """Give `job_id` the next turn of `name` unless it has one (JobStore.create_call already numbers conversation
        turns: this is for a job created without it)."""
        args = RegisterArgs(
            job=self.keys.job(job_id),
            waiters=self.keys.conversation_waiters(name, tenant),
            seq=self.keys.conversation_seq(name, tenant),
            job_id=job_id,
            ttl=self.ttl_s,
        )
        self._register(keys=args.keys(), args=args.argv())

    def acquire_call(self, name: str, job_id: str, tenant: str = DEFAULT_TENANT) -> ScriptCall[TurnGrant]:
        """Take the turn lock for `job_id`, or say whom it waits for; re-entrant for the holder (retries)."""
        return AcquireArgs(
            lock=self.keys.conversation_lock(name, tenant),
            waiters=self.keys.conversation_waiters(name, tenant),
            seq=self.keys.conversation_seq(name, tenant),
            job=self.keys.job(job_id),
            job_id=job_id,
            unused="",
            job_key_prefix=self.keys.job(""),
            ttl=self.ttl_s,
            pops=HEAD_POPS,
        ).call(self._acquire, _grant)

    def release_call(self, name: str, job_id: str, tenant: str = DEFAULT_TENANT) -> ScriptCall[str | None]:
        """Free the turn lock held by `job_id` (a no-op otherwise); -> the next waiting job to promote, if any."""
        return ReleaseArgs(
            lock=self.keys.conversation_lock(name, tenant),
            waiters=self.keys.conversation_waiters(name, tenant),
            job_id=job_id,
            pops=HEAD_POPS,
            job_key_prefix=self.keys.job(""),
        ).call(self._release, lambda n: text(n) if n else None)

    def record_turn_call(
        self, name: str, turn: Turn, move_pointer: bool, tenant: str = DEFAULT_TENANT
    ) -> PipeCall[None]:
        """Append a finished turn (one MULTI/EXEC); with `move_pointer`, its session becomes the conversation's
        latest."""
        now, ttl_s = time.time(), self.ttl_s
        pointer, turns, names = (
            self.keys.conversation(name, tenant),
            self.keys.conversation_turns(name, tenant),
            self.keys.conversations(tenant),
        )

        def queue(pipe: Any) -> None:
            if move_pointer and turn.session_id:
                pipe.set(pointer, turn.session_id, ex=ttl_s)
            else:
                pipe.expire(pointer, ttl_s)
            pipe.rpush(turns, turn.model_dump_json())
            pipe.ltrim(turns, -TURNS_KEPT, -1)
            pipe.expire(turns, ttl_s)
            pipe.zadd(names, {name: now})
            pipe.zremrangebyscore(names, "-inf", f"({now - ttl_s}")  # expired conversations
            pipe.expire(names, ttl_s)

        return PipeCall(self.redis, queue, done, transaction=True)

    def turns(self, name: str, tenant: str = DEFAULT_TENANT) -> list[Turn]:
        """The finished turns, oldest first."""
        return [
            Turn.model_validate_json(raw)
            for raw in self.redis.lrange(self.keys.conversation_turns(name, tenant), 0, -1)
        ]

    def info(self, name: str, tenant: str = DEFAULT_TENANT) -> ConversationInfo | None:
        """Pointer, turns, running and waiting jobs; None when the conversation does not exist (or expired)."""
        running = self.redis.get(self.keys.conversation_lock(name, tenant))
        if running and text(self.redis.hget(self.keys.job(text(running)), "status")) not in ACTIVE:
            running = None  # a stale lock: its holder finished without releasing it (the next turn takes over)
        waiting = [text(j) for j in self.redis.zrange(self.keys.conversation_waiters(name, tenant), 0, -1)]
        info = ConversationInfo(
            name=name,
            session_id=run_call(self.latest_session_call(name, tenant)),
            turns=self.turns(name, tenant),
            running=text(running) if running else None,
            waiting=[j for j in waiting if j != (text(running) if running else None)],
        )
        if info.session_id is None and not info.turns and info.running is None and not info.waiting:
            return None
        return info

    def names(self, limit: int = 100, tenant: str = DEFAULT_TENANT) -> list[str]:
        """Conversation names, most recent turn first (entries older than the retention are pruned)."""
        self.redis.zremrangebyscore(self.keys.conversations(tenant), "-inf", time.time() - self.ttl_s)
        return [text(n) for n in self.redis.zrevrange(self.keys.conversations(tenant), 0, limit - 1)]

    def session_ids(self, name: str, tenant: str = DEFAULT_TENANT) -> list[str]:
        """Every session id the conversation's turns ended in (and its pointer), without duplicates."""
        turns = self.turns(name, tenant)
        ids = [t.session_id for t in turns if t.session_id]
        ids += [t.resumed_from for t in turns if t.resumed_from]
        latest = run_call(self.latest_session_call(name, tenant))
        if latest:
            ids.append(latest)
        return list(dict.fromkeys(ids))

    # ---- whose sessions: a session is the tenant's whose runs created it -----------------------------------

    def claim_session_call(self, session_id: str, tenant: str) -> PipeCall[None]:
        """A run of `tenant` (other than `default`) works in `session_id`: mark it the tenant's (`session_tenant`).
        Kept twice the session retention from the last run in it, so it outlives the transcript."""
        key, ttl_s = self.keys.session_tenant(session_id), 2 * self.ttl_s
        return PipeCall(self.redis, lambda p: p.set(key, tenant, ex=ttl_s), done)

    def may_resume_call(self, session_id: str, tenant: str) -> PipeCall[bool]:
        """Whether a job of `tenant` may resume (or fork) `session_id`: the session is the tenant's own. A session
        without an owner is the default tenant's (ownership is kept for the others only), unless none is stored at
        all (then there is nothing to resume: the run's missing-session handling decides)."""
        owner_key, projects = self.keys.session_tenant(session_id), self.keys.session_projects(session_id)

        def parse(replies: list[Any]) -> bool:
            owner, stored = replies
            if owner is not None:
                return bool(text(owner) == tenant)
            return tenant == DEFAULT_TENANT or not stored

        return PipeCall(self.redis, lambda p: (p.get(owner_key), p.exists(projects)), parse)

    def forget(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        """Delete the pointer, turns, lock and waiters (not the transcripts: see `delete_conversation`)."""
        self.redis.delete(
            self.keys.conversation(name, tenant),
            self.keys.conversation_turns(name, tenant),
            self.keys.conversation_lock(name, tenant),
            self.keys.conversation_waiters(name, tenant),
        )
        self.redis.zrem(self.keys.conversations(tenant), name)


def _first_text(replies: list[Any]) -> str | None:
    return None if replies[0] is None else text(replies[0])


def _grant(reply: Any) -> TurnGrant:
    granted, holder = reply
    return TurnGrant(bool(granted), text(holder) if holder else None)


async def delete_conversation(
    conversations: ConversationStore, sessions: RedisSessionStore, name: str, tenant: str = DEFAULT_TENANT
) -> list[str]:
    """Delete `tenant`'s conversation `name` and the transcripts of all its sessions; -> the session ids whose
    transcripts went.

    The conversation store is sync: meant for the CLI and tests, not for a busy event loop.
    """
    ids = conversations.session_ids(name, tenant)
    deleted = [sid for sid in ids if await sessions.delete_everywhere(sid)]
    conversations.forget(name, tenant)
    return deleted
