"""RedisSessionStore: the SDK's SessionStore on Redis, so any worker can resume any session.

Why and how the SDK calls it: docs/cli-behaviour.md#sessions-and-resume.

Layout per session (all under `Keys.session...`, every key expiring `ttl_s` after the session's last append):
a list per transcript (main or subpath) of its entries, one compressed element per append batch (the forms an
element takes, old uncompressed entries included: `claudeq/transcripts/_codec.py`), a string of entry uuids per
transcript (dedup: one JSON text and a newline each, about half of what a set costs; sessions written before keep their
set, still read), a set of subpaths, the folded summary; per project a sorted set session id -> mtime (ms);
per session id the set of project keys holding it (to find a session by id alone).

With a transcript archive (`claudeq/archive.py`), `archive_session` moves a session out of Redis; every read here
(load, listings, subkeys, projects) then reads the archive beside Redis, a transcript being its archived elements
followed by any appended to Redis since, and a delete or retention reaches both.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from claudeq import connections
from claudeq.archive import Archive, ArchivedSession, open_archive
from claudeq.config.settings import Settings
from claudeq.keys import Keys

from ._codec import Codec, decode, encode

if TYPE_CHECKING:
    # The SDK's types only: the producer install (`claudeq transcript`) and the testing kit read and write sessions
    # here without claude-agent-sdk (docs/architecture.md#packaging).
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStore,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

#: How long a store trusts the archived uuids it read for a transcript (s).
ARCHIVED_IDS_S = 60.0
#: Optimistic transactions retried this many times under contention before giving up (the SDK retries the batch).
CAS_RETRIES = 50


class SessionStoreContention(RuntimeError):
    """An append lost its optimistic transaction too many times in a row."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@functools.cache
def _sdk_fold() -> Callable[..., SessionSummaryEntry] | None:
    """The SDK's `fold_session_summary` (the summaries its session listing reads), None without the SDK."""
    try:
        from claude_agent_sdk import fold_session_summary
    except ImportError:
        return None
    return fold_session_summary


class RedisSessionStore:
    """Async SessionStore on `redis.asyncio`: uuid-deduplicated appends, race-safe summaries, retention TTL."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        ttl_s: int,
        scrub: Callable[[str], str] | None = None,
        codec: Codec = "zstd",
        archive: Archive | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_s = ttl_s
        self._scrub = scrub
        self._codec: Codec = codec
        self._archive = archive
        # uuids archived, per transcript, with when they were read (dedup; re-read after ARCHIVED_IDS_S)
        self._archived_ids: dict[tuple[str, str, str], tuple[float, set[str]]] = {}
        self._last_mtime = 0

    @classmethod
    def from_settings(
        cls, settings: Settings, redis: aioredis.Redis | None = None, scrub: Callable[[str], str] | None = None
    ) -> RedisSessionStore:
        """A store under the settings' key prefix with their session retention; `scrub` cleans every string of
        every entry before it is stored (the worker passes its secret redaction)."""
        client = redis if redis is not None else connections.async_client(settings)
        archive = open_archive(settings.archive_url)
        return cls(
            client, Keys(settings.key_prefix), settings.session_retention_s, scrub, settings.session_codec, archive
        )

    @property
    def keys(self) -> Keys:
        """The key shapes this store writes."""
        return self._keys

    @property
    def archive(self) -> Archive | None:
        """The transcript archive this store reads beside Redis, if any."""
        return self._archive

    @property
    def ttl_s(self) -> int:
        """Retention of a session after its last append."""
        return self._ttl_s

    async def aclose(self) -> None:
        """Close the Redis connection pool."""
        await self._redis.aclose()

    def _next_mtime(self, floor: int = 0) -> int:
        # Strictly increasing, so back-to-back appends get distinct mtimes and a sidecar is never older than its
        # session in list_sessions (the SDK's staleness check compares them).
        now_ms = max(int(time.time() * 1000), self._last_mtime + 1, floor + 1)
        self._last_mtime = now_ms
        return now_ms

    # -- required --------------------------------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append entries not already stored (by uuid), fold the summary and refresh the TTL, in one transaction."""
        if not entries:
            return
        if self._scrub is not None:
            # A transcript holds whatever the run saw (a tool printing its environment, say): no secret is stored.
            entries = [cast("SessionStoreEntry", _scrubbed(e, self._scrub)) for e in entries]
        project_key, session_id, subpath = key["project_key"], key["session_id"], key.get("subpath") or None
        k = self._keys
        entries_key = k.session_entries(project_key, session_id, subpath)
        ids_key = k.session_ids(project_key, session_id, subpath)
        uuids_key = k.session_uuids(project_key, session_id, subpath)  # written before session_ids
        summary_key = k.session_summary(project_key, session_id)
        subkeys_key = k.session_subkeys(project_key, session_id)
        watched = [ids_key, uuids_key, summary_key, subkeys_key] if subpath is None else [ids_key, uuids_key]
        for _ in range(CAS_RETRIES):
            async with self._redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(*watched)
                    fresh, new_uuids = await self._fresh_entries(
                        pipe, ids_key, uuids_key, entries, await self._archived_uuids(project_key, session_id, subpath)
                    )
                    if not fresh:
                        return
                    prev = await pipe.get(summary_key) if subpath is None else None
                    if prev is None and subpath is None and self._archive is not None:
                        archived = await self._archived(project_key, session_id)  # fold on from the archived one
                        prev = archived.summary if archived else None
                    subpaths = await pipe.smembers(subkeys_key) if subpath is None else set()
                    # Compressing a batch of tens of KB takes milliseconds: off the loop the CLI's messages arrive on.
                    elements = await asyncio.to_thread(encode, list(fresh), self._codec)
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                    pipe.rpush(entries_key, *elements)
                    if new_uuids and self._codec == "none":
                        pipe.sadd(uuids_key, *new_uuids)  # the layout as before, entries and uuids alike
                    elif new_uuids:
                        pipe.append(ids_key, "".join(_dumps(u) + "\n" for u in new_uuids))
                    if subpath is None:
                        self._stage_main(pipe, key, fresh, prev, subpaths)
                    else:
                        pipe.sadd(subkeys_key, subpath)
                    for name in (entries_key, ids_key, uuids_key, subkeys_key):
                        pipe.expire(name, self._ttl_s)
                    await pipe.execute()
                    return
                except WatchError:
                    continue
        raise SessionStoreContention(f"append to session {session_id} lost {CAS_RETRIES} transactions in a row")

    async def _archived_uuids(self, project_key: str, session_id: str, subpath: str | None) -> set[str]:
        """The uuids of a transcript's archived entries (read once per transcript by this store)."""
        if self._archive is None:
            return set()
        key = (project_key, session_id, subpath or "")
        cached = self._archived_ids.get(key)
        if cached is None or time.monotonic() - cached[0] > ARCHIVED_IDS_S:
            archived = await self._archived(project_key, session_id)
            text = archived.ids.get(subpath or "", "") if archived else ""
            if len(self._archived_ids) > 1000:
                self._archived_ids.clear()
            cached = self._archived_ids[key] = (
                time.monotonic(),
                {json.loads(line) for line in text.split("\n") if line},
            )
        return cached[1]

    async def _archived(self, project_key: str, session_id: str) -> ArchivedSession | None:
        if self._archive is None:
            return None
        return await asyncio.to_thread(self._archive.get_session, self._keys.prefix, project_key, session_id)

    async def _fresh_entries(
        self,
        pipe: Any,
        ids_key: str,
        uuids_key: str,
        entries: list[SessionStoreEntry],
        archived: set[str] | None = None,
    ) -> tuple[list[SessionStoreEntry], list[str]]:
        """Entries whose uuid is neither stored (in Redis or the archive) nor repeated earlier in the batch; entries
        without uuid always."""
        candidates = [u for e in entries if isinstance(u := e.get("uuid"), str) and u]
        stored: set[str] = set(archived or ())
        if candidates:
            raw = await pipe.get(ids_key)
            if raw:
                text = raw.decode() if isinstance(raw, bytes) else str(raw)
                stored = {json.loads(line) for line in text.split("\n") if line}
            flags = await pipe.smismember(uuids_key, candidates)
            stored |= {u for u, flag in zip(candidates, flags, strict=True) if flag}
        fresh: list[SessionStoreEntry] = []
        seen: list[str] = []
        for entry in entries:
            uuid = entry.get("uuid")
            if isinstance(uuid, str) and uuid:
                if uuid in stored:
                    continue
                stored.add(uuid)
                seen.append(uuid)
            fresh.append(entry)
        return fresh, seen

    def _stage_main(
        self,
        pipe: Any,
        key: SessionKey,
        fresh: list[SessionStoreEntry],
        prev_raw: bytes | str | None,
        subpaths: set[Any],
    ) -> None:
        """Queue the summary fold, the project index and the TTL refresh of the whole session."""
        project_key, session_id = key["project_key"], key["session_id"]
        k = self._keys
        prev = cast("SessionSummaryEntry", json.loads(prev_raw)) if prev_raw else None
        now_ms = self._next_mtime(prev["mtime"] if prev else 0)
        fold = _sdk_fold()
        if fold is not None:  # without the SDK (the testing kit on the producer install) no summary is kept
            folded = fold(prev, {"project_key": project_key, "session_id": session_id}, fresh)
            folded["mtime"] = now_ms  # storage write time, the same clock list_sessions reports
            pipe.set(k.session_summary(project_key, session_id), _dumps(folded), ex=self._ttl_s)
        pipe.zadd(k.session_index(project_key), {session_id: now_ms})
        # Sessions not appended to for a whole retention period have expired: drop them from the index, which a
        # busy project key (every job without a cwd shares one) would otherwise grow forever.
        pipe.zremrangebyscore(k.session_index(project_key), "-inf", f"({now_ms - self._ttl_s * 1000}")
        pipe.expire(k.session_index(project_key), self._ttl_s)
        pipe.sadd(k.session_projects(session_id), project_key)
        pipe.expire(k.session_projects(session_id), self._ttl_s)
        for raw in subpaths:
            sub = raw.decode() if isinstance(raw, bytes) else str(raw)
            pipe.expire(k.session_entries(project_key, session_id, sub), self._ttl_s)
            pipe.expire(k.session_ids(project_key, session_id, sub), self._ttl_s)
            pipe.expire(k.session_uuids(project_key, session_id, sub), self._ttl_s)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """All entries of one transcript in append order (its archived ones first); None when it was never written
        (or expired)."""
        raw: list[bytes | str] = list(
            await self._redis.lrange(
                self._keys.session_entries(key["project_key"], key["session_id"], key.get("subpath") or None), 0, -1
            )
        )
        archived = await self._archived(key["project_key"], key["session_id"])
        if archived is not None:
            raw = [*archived.transcripts.get(key.get("subpath") or "", []), *raw]
        if not raw:
            return None
        return [cast("SessionStoreEntry", e) for e in decode(raw)]

    # -- optional --------------------------------------------------------------------------------------------

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """Main transcripts of a project with their last append time (epoch ms)."""
        live = dict(await self._live_sessions(project_key))
        for sid, mtime, _ in await self._archived_sessions(project_key):
            live[sid] = max(mtime, live.get(sid, 0))
        return [{"session_id": sid, "mtime": mtime} for sid, mtime in live.items()]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The folded summaries of a project's live sessions."""
        live = await self._live_sessions(project_key)
        raws = await self._redis.mget([self._keys.session_summary(project_key, sid) for sid, _ in live]) if live else []
        found = {sid: raw for (sid, _), raw in zip(live, raws, strict=True) if raw}
        for sid, _, summary in await self._archived_sessions(project_key):
            if sid not in found and summary:  # a session appended to since it was archived: Redis's is newer
                found[sid] = summary
        return [cast("SessionSummaryEntry", json.loads(raw)) for raw in found.values()]

    async def _archived_sessions(self, project_key: str) -> list[tuple[str, int, str | None]]:
        if self._archive is None:
            return []
        return await asyncio.to_thread(self._archive.sessions, self._keys.prefix, project_key)

    async def _live_sessions(self, project_key: str) -> list[tuple[str, int]]:
        """Index members whose transcript still exists; expired ones are pruned from the index."""
        index = self._keys.session_index(project_key)
        members = cast(list[tuple[bytes | str, float]], await self._redis.zrange(index, 0, -1, withscores=True))
        if not members:
            return []
        ids = [m.decode() if isinstance(m, bytes) else m for m, _ in members]
        async with self._redis.pipeline(transaction=False) as pipe:
            for sid in ids:
                pipe.exists(self._keys.session_entries(project_key, sid))
            alive = await pipe.execute()
        gone = [sid for sid, ok in zip(ids, alive, strict=True) if not ok]
        if gone:
            await self._redis.zrem(index, *gone)
        return [(sid, int(score)) for sid, (_, score), ok in zip(ids, members, alive, strict=True) if ok]

    async def delete(self, key: SessionKey) -> None:
        """Delete one transcript; deleting the main transcript cascades to its subpaths, summary and indexes."""
        project_key, session_id, subpath = key["project_key"], key["session_id"], key.get("subpath") or None
        k = self._keys
        subkeys_key = k.session_subkeys(project_key, session_id)
        if self._archive is not None:
            await asyncio.to_thread(self._archive.delete_session, k.prefix, project_key, session_id, subpath)
            self._archived_ids.clear()
        if subpath is not None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(
                    k.session_entries(project_key, session_id, subpath),
                    k.session_ids(project_key, session_id, subpath),
                    k.session_uuids(project_key, session_id, subpath),
                )
                pipe.srem(subkeys_key, subpath)
                await pipe.execute()
            return
        for _ in range(CAS_RETRIES):
            async with self._redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(subkeys_key)
                    subs = [s.decode() if isinstance(s, bytes) else str(s) for s in await pipe.smembers(subkeys_key)]
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                    names = [
                        k.session_entries(project_key, session_id),
                        k.session_ids(project_key, session_id),
                        k.session_uuids(project_key, session_id),
                        k.session_summary(project_key, session_id),
                        subkeys_key,
                    ]
                    for sub in subs:
                        names += [
                            k.session_entries(project_key, session_id, sub),
                            k.session_ids(project_key, session_id, sub),
                            k.session_uuids(project_key, session_id, sub),
                        ]
                    pipe.delete(*names)
                    pipe.zrem(k.session_index(project_key), session_id)
                    pipe.srem(k.session_projects(session_id), project_key)
                    await pipe.execute()
                    return
                except WatchError:
                    continue
        raise SessionStoreContention(f"delete of session {session_id} lost {CAS_RETRIES} transactions in a row")

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths (subagent transcripts) still stored under a session, sorted."""
        project_key, session_id = key["project_key"], key["session_id"]
        raw = await self._redis.smembers(self._keys.session_subkeys(project_key, session_id))
        subs = sorted(s.decode() if isinstance(s, bytes) else str(s) for s in raw)
        archived = await self._archived(project_key, session_id)
        found = {sub for sub, elements in (archived.transcripts.items() if archived else ()) if sub and elements}
        if subs:
            async with self._redis.pipeline(transaction=False) as pipe:
                for sub in subs:
                    pipe.exists(self._keys.session_entries(project_key, session_id, sub))
                alive = await pipe.execute()
            found |= {sub for sub, ok in zip(subs, alive, strict=True) if ok}
        return sorted(found)

    # -- claudeq helpers -------------------------------------------------------------------------------------

    async def projects_of(self, session_id: str) -> list[str]:
        """The project keys under which `session_id` has a stored main transcript (usually one)."""
        raw = await self._redis.smembers(self._keys.session_projects(session_id))
        projects = sorted(p.decode() if isinstance(p, bytes) else str(p) for p in raw)
        found = []
        for project_key in projects:
            if await self._redis.exists(self._keys.session_entries(project_key, session_id)):
                found.append(project_key)
        if self._archive is not None:
            archived = await asyncio.to_thread(self._archive.projects_of, self._keys.prefix, session_id)
            found = sorted(set(found) | set(archived))
        return found

    async def delete_everywhere(self, session_id: str) -> int:
        """Delete a session id under every project key that holds it; returns how many transcripts went."""
        projects = await self.projects_of(session_id)
        for project_key in projects:
            await self.delete({"project_key": project_key, "session_id": session_id})
        return len(projects)

    async def retain(self, session_id: str, ttl_s: int) -> None:
        """Keep a session (under every project key holding it) at most `ttl_s` more seconds; 0 deletes it now. An
        append after this gives it the full retention again (it is being worked in)."""
        if ttl_s <= 0:
            await self.delete_everywhere(session_id)
            return
        k = self._keys
        if self._archive is not None:
            await asyncio.to_thread(self._archive.retain_session, k.prefix, session_id, time.time() + ttl_s)
        for project_key in await self.projects_of(session_id):
            subs = await self.list_subkeys({"project_key": project_key, "session_id": session_id})
            names = [
                k.session_entries(project_key, session_id),
                k.session_ids(project_key, session_id),
                k.session_uuids(project_key, session_id),
                k.session_summary(project_key, session_id),
                k.session_subkeys(project_key, session_id),
            ]
            for sub in subs:
                names.append(k.session_entries(project_key, session_id, sub))
                names.append(k.session_ids(project_key, session_id, sub))
                names.append(k.session_uuids(project_key, session_id, sub))
            async with self._redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.expire(name, ttl_s, lt=True)
                await pipe.execute()

    async def archive_session(self, session_id: str) -> int:
        """Move a session (under every project key holding it in Redis) to the archive: its transcripts' elements
        as stored, their uuids, its summary and mtime, with the retention its keys had left; then its keys out of
        Redis, unless an append came meanwhile (then the move is made again: the archive skips what it holds).
        -> elements moved. Requires an archive."""
        assert self._archive is not None, "archive_session needs a transcript archive"
        k = self._keys
        raw_projects = await self._redis.smembers(k.session_projects(session_id))
        moved = 0
        for project_key in sorted(p.decode() if isinstance(p, bytes) else str(p) for p in raw_projects):
            for _ in range(CAS_RETRIES):
                done, count = await self._archive_once(project_key, session_id)
                if done:
                    moved += count
                    break
            else:
                raise SessionStoreContention(f"archiving session {session_id} lost {CAS_RETRIES} transactions")
        self._archived_ids.clear()
        return moved

    async def _archive_once(self, project_key: str, session_id: str) -> tuple[bool, int]:
        k = self._keys
        subkeys_key = k.session_subkeys(project_key, session_id)
        subs = sorted(s.decode() if isinstance(s, bytes) else str(s) for s in await self._redis.smembers(subkeys_key))
        transcripts = [None, *subs]
        names = [k.session_summary(project_key, session_id), subkeys_key]
        for sub in transcripts:
            names += [
                k.session_entries(project_key, session_id, sub),
                k.session_ids(project_key, session_id, sub),
                k.session_uuids(project_key, session_id, sub),
            ]
        async with self._redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(*names)
                read = self._redis.pipeline(transaction=False)  # read beside the watching connection
                for sub in transcripts:
                    read.lrange(k.session_entries(project_key, session_id, sub), 0, -1)
                    read.get(k.session_ids(project_key, session_id, sub))
                    read.smembers(k.session_uuids(project_key, session_id, sub))
                read.get(k.session_summary(project_key, session_id))
                read.zscore(k.session_index(project_key), session_id)
                read.pttl(k.session_entries(project_key, session_id))
                replies = await read.execute()
                summary, mtime, pttl = replies[-3:]
                session = ArchivedSession(project_key, session_id, int(mtime or time.time() * 1000), None)
                if summary:
                    session.summary = summary.decode() if isinstance(summary, bytes) else str(summary)
                for i, sub in enumerate(transcripts):
                    elements, ids, uuids = replies[3 * i : 3 * i + 3]
                    if not elements:
                        continue
                    text = ids.decode() if isinstance(ids, bytes) else str(ids or "")
                    for u in sorted(x.decode() if isinstance(x, bytes) else str(x) for x in uuids):
                        text += _dumps(u) + "\n"  # the set of sessions written before the string
                    session.transcripts[sub or ""] = [bytes(e) for e in elements]
                    session.ids[sub or ""] = text
                count = sum(len(e) for e in session.transcripts.values())
                if count:
                    keep_s = (int(pttl) / 1000) if pttl and int(pttl) > 0 else self._ttl_s
                    await asyncio.to_thread(self._archive.put_session, k.prefix, session, time.time() + keep_s)  # type: ignore[union-attr]
                pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                pipe.delete(*names)
                pipe.zrem(k.session_index(project_key), session_id)
                pipe.srem(k.session_projects(session_id), project_key)
                await pipe.execute()
                return True, count
            except WatchError:
                return False, 0

    async def copy_session(self, session_id: str, from_project: str, to_project: str) -> int:
        """Copy a session (main transcript and subpaths) to another project key; -> entries copied.

        The SDK finds a transcript under the project key of the run's cwd: a worker whose default cwd differs
        (another temp dir) still resumes the session once it is copied under its own key.
        """
        source: SessionKey = {"project_key": from_project, "session_id": session_id}
        entries = await self.load(source)
        if not entries:
            return 0
        await self.append({"project_key": to_project, "session_id": session_id}, entries)
        copied = len(entries)
        for sub in await self.list_subkeys({"project_key": from_project, "session_id": session_id}):
            sub_entries = await self.load({**source, "subpath": sub})
            if sub_entries:
                await self.append({"project_key": to_project, "session_id": session_id, "subpath": sub}, sub_entries)
                copied += len(sub_entries)
        return copied


def _scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    """`value` with `scrub` applied to every string in it (dict keys included)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: _scrubbed(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, scrub) for v in value]
    return value


if TYPE_CHECKING:

    def _conforms(store: RedisSessionStore) -> SessionStore:
        """mypy proves here that the store is the SDK's SessionStore (a Protocol, so not subclassed at run time)."""
        return store
