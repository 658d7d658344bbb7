"""Concurrency keys: at most `concurrency_limit` runs of the jobs sharing a key at once, fleet-wide; the others wait,
deferred, in one line per key in rank order (docs/jobs.md#concurrency-keys). The scripts are `claudeq/lua/key/`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from claudeq.keys import Keys
from claudeq.lua import script
from claudeq.models import JobSpec
from claudeq.script_args import ScriptArgs, key

from .job_store import WorkerJobStore

TAKE = script("key/take.lua")
RELEASE = script("key/release.lua")
DROP = script("key/drop.lua")


@dataclass(frozen=True, kw_only=True)
class TakeArgs(ScriptArgs):
    """TAKE's arguments (claudeq/script_args.py)."""

    SCRIPT = "key/take.lua"
    running: str = key()
    waiters: str = key()
    job: str
    limit: int
    expiry: str
    now: str
    rank: str
    peek: str


@dataclass(frozen=True, kw_only=True)
class ReleaseArgs(ScriptArgs):
    """RELEASE's arguments."""

    SCRIPT = "key/release.lua"
    running: str = key()
    waiters: str = key()
    job: str
    limit: int
    now: str


@dataclass(frozen=True, kw_only=True)
class DropArgs(ScriptArgs):
    """DROP's arguments."""

    SCRIPT = "key/drop.lua"
    waiters: str = key()
    job: str


@dataclass(frozen=True)
class Taken:
    """The job holds its key (`held`: runs holding it now, this one included)."""

    held: int


@dataclass(frozen=True)
class InLine:
    """The job waits for its key: `held` runs hold it; `ahead`: waiters ranked before it while the key has room
    (to be woken, or dropped when they no longer wait)."""

    held: int
    ahead: list[str]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ConcurrencyKeys:
    """The keys' scripts on the worker's job store (its client, batched on the engine loop)."""

    def __init__(self, store: WorkerJobStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys
        self._take = store.redis.register_script(TAKE)
        self._release = store.redis.register_script(RELEASE)
        self._drop = store.redis.register_script(DROP)

    def _names(self, spec: JobSpec) -> tuple[str, str]:
        """The key's running set and its waiters' line."""
        assert spec.concurrency_key is not None
        running = self.keys.concurrency_key(spec.concurrency_key, spec.tenant)
        return running, f"{running}:waiters"

    async def take(
        self, job_id: str, spec: JobSpec, rank: float, hold_s: float, *, peek: bool = False
    ) -> Taken | InLine:
        """Take the job's key for a run (or, `peek`, only say whether it would be taken); else join its line."""
        now = time.time()
        running, waiters = self._names(spec)
        args = TakeArgs(
            running=running,
            waiters=waiters,
            job=job_id,
            limit=spec.concurrency_limit,
            expiry=f"{now + hold_s:.3f}",
            now=f"{now:.3f}",
            rank=repr(rank),
            peek="1" if peek else "0",
        )

        def parse(reply: Any) -> Taken | InLine:
            if int(reply[0]) == 1:
                return Taken(int(reply[1]))
            return InLine(int(reply[1]), [_text(r) for r in reply[2:]])

        return await self.store.send(args.call(self._take, parse))

    async def release(self, job_id: str, spec: JobSpec) -> list[str]:
        """Let go of the job's key; the waiters to wake, best first."""
        running, waiters = self._names(spec)
        args = ReleaseArgs(
            running=running, waiters=waiters, job=job_id, limit=spec.concurrency_limit, now=f"{time.time():.3f}"
        )
        return await self.store.send(args.call(self._release, lambda reply: [_text(r) for r in reply]))

    async def drop(self, job_id: str, spec: JobSpec) -> None:
        """Take a job that no longer waits out of its key's line."""
        await self.store.send(DropArgs(waiters=self._names(spec)[1], job=job_id).call(self._drop, lambda _: None))
