"""The transcript archive on real stores (PostgreSQL on this machine, SQLite in the test's folder) beside a real
Redis: the SDK's SessionStore conformance suite with every append moved to the archive at once, sessions moved out
of Redis and read back byte for byte, appends after a move, idempotent moves, retention, and a finished job's
events moved and read the same."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from claudeq.archive import ArchivedSession, SqlArchive, open_archive
from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import Event, JobResult
from claudeq.producer.client import Client
from claudeq.transcripts import RedisSessionStore
from claudeq.worker.store.job_store import JobWrite, make_worker_store
from tests.support.aio import run
from tests.support.archive import archive_url
from tests.support.tree import tree_env

pytestmark = pytest.mark.integration

PROJECT = "-srv-app"


@pytest.fixture(params=["sqlite", "postgresql"])
def archive(request: pytest.FixtureRequest, tmp_path: Path, settings: Settings) -> Iterator[SqlArchive]:
    """An archive of each kind; this test's rows (under its key prefix) are deleted afterwards."""
    found = open_archive(archive_url(request.param, tmp_path))
    assert found is not None
    yield found
    found.drop(settings.key_prefix)


@pytest.fixture
def arch_settings(settings: Settings, archive: SqlArchive) -> Settings:
    return settings.model_copy(update={"archive_url": archive.url})


class ArchivingStore(RedisSessionStore):
    """Moves a session to the archive after every append: every read then goes through the archive."""

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        await super().append(key, entries)
        await self.archive_session(key["session_id"])


def entry(n: int, text: str = "") -> dict[str, Any]:
    return {"type": "user", "uuid": f"u-{n}", "message": {"role": "user", "content": text or f"line {n} " * 40}}


async def session_keys(client: aioredis.Redis, prefix: str) -> list[str]:
    """The session keys under `prefix` that hold a transcript (`session-tenant` aside, which stays in Redis)."""
    found = [k.decode() async for k in client.scan_iter(match=f"{prefix}session*", count=1000)]
    return sorted(k for k in found if "session-tenant:" not in k)


async def test_conformance_suite_passes_with_every_append_archived(
    aredis: aioredis.Redis, settings: Settings, archive: SqlArchive
) -> None:
    prefixes: list[str] = []

    def make_store() -> RedisSessionStore:
        prefixes.append(f"{settings.key_prefix}{uuid.uuid4().hex[:6]}:")
        return ArchivingStore(aredis, Keys(prefixes[-1]), 600, archive=archive)

    try:
        await run_session_store_conformance(make_store, skip_optional=frozenset())
    finally:
        for prefix in prefixes:
            archive.drop(prefix)


async def test_a_moved_session_leaves_redis_and_reads_back_the_same(
    aredis: aioredis.Redis, arch_settings: Settings, archive: SqlArchive
) -> None:
    store = RedisSessionStore.from_settings(arch_settings, aredis)
    assert store.archive is archive
    main: SessionKey = {"project_key": PROJECT, "session_id": "s-1"}
    sub: SessionKey = {**main, "subpath": "subagents/agent-1"}
    await store.append(main, [entry(1), entry(2)])  # type: ignore[list-item]
    await store.append(main, [entry(3, "the answer")])  # type: ignore[list-item]
    await store.append(sub, [entry(10)])  # type: ignore[list-item]
    before, before_sub = await store.load(main), await store.load(sub)
    [summary] = await store.list_session_summaries(PROJECT)
    listed = await store.list_sessions(PROJECT)
    assert await session_keys(aredis, arch_settings.key_prefix)

    moved = await store.archive_session("s-1")
    assert moved == 3  # two batches of the main transcript, one of the subagent's
    assert await session_keys(aredis, arch_settings.key_prefix) == []  # nothing of it left in Redis
    other = RedisSessionStore.from_settings(arch_settings, aredis)  # another worker: nothing cached
    assert await other.load(main) == before and await other.load(sub) == before_sub
    assert await other.list_sessions(PROJECT) == listed
    assert await other.list_session_summaries(PROJECT) == [summary]
    assert await other.list_subkeys(main) == ["subagents/agent-1"]
    assert await other.projects_of("s-1") == [PROJECT]

    # A resumed session appends again: archived entries first, then the new ones; a retried batch is deduplicated
    # against what the archive holds.
    await other.append(main, [entry(3, "the answer"), entry(4)])  # type: ignore[list-item]
    after = await other.load(main)
    assert before is not None and after == [*before, entry(4)]
    assert (await other.archive_session("s-1")) == 1 and await other.load(main) == after
    session = archive.get_session(arch_settings.key_prefix, PROJECT, "s-1")
    assert session is not None and len(session.transcripts[""]) == 3  # moved twice, nothing stored twice

    await other.delete(main)
    assert await other.load(main) is None and await other.load(sub) is None
    assert archive.get_session(arch_settings.key_prefix, PROJECT, "s-1") is None
    assert await other.list_sessions(PROJECT) == []


async def test_a_move_retried_after_a_crash_adds_nothing(settings: Settings, archive: SqlArchive) -> None:
    prefix = settings.key_prefix
    session = ArchivedSession(PROJECT, "s-2", 1, None, {"": [b"one", b"two"]}, {"": '"u-1"\n'})
    archive.put_session(prefix, session, 4_000_000_000)
    archive.put_session(prefix, session, 4_000_000_000)  # the Redis trim never happened: the move runs again
    archive.put_session(prefix, ArchivedSession(PROJECT, "s-2", 2, None, {"": [b"three"]}, {"": '"u-3"\n'}), 4e9)
    got = archive.get_session(prefix, PROJECT, "s-2")
    assert got is not None and got.transcripts == {"": [b"one", b"two", b"three"]}
    assert got.ids == {"": '"u-1"\n"u-3"\n'} and got.mtime == 2


async def test_retention_reaches_the_archive(
    aredis: aioredis.Redis, arch_settings: Settings, archive: SqlArchive
) -> None:
    store = RedisSessionStore.from_settings(arch_settings, aredis)
    key: SessionKey = {"project_key": PROJECT, "session_id": "s-3"}
    await store.append(key, [entry(1)])  # type: ignore[list-item]
    await store.archive_session("s-3")
    await store.retain("s-3", 30)  # kept 30 s more at most
    assert archive.purge(arch_settings.key_prefix) == 0 and await store.load(key) is not None
    assert archive.purge(arch_settings.key_prefix, now=time.time() + 31) == 1
    assert await store.load(key) is None
    await store.append(key, [entry(2)])  # type: ignore[list-item]
    await store.archive_session("s-3")
    await store.retain("s-3", 0)  # dropped now (a one-shot job's transcript at its success)
    assert await store.load(key) is None and archive.get_session(arch_settings.key_prefix, PROJECT, "s-3") is None


def test_a_finished_jobs_events_move_to_the_archive_and_read_the_same(
    arch_settings: Settings, redis_client: redis.Redis, archive: SqlArchive
) -> None:
    client = Client(arch_settings, redis_client=redis_client)
    store = make_worker_store(arch_settings, redis_client)
    assert store.archive is archive and client.store.archive is archive
    handle = client.submit(prompt="archived after its end")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    assert run(
        store.send(
            store.append_call(
                handle.id,
                claim.fence,
                [Event(type="assistant_text", attempt=1, data={"text": f"part {n} " * 50}) for n in range(8)],
            )
        )
    )
    assert not store.archive_job(handle.id)  # still running: nothing moves
    answer = JobResult(text="The review found three things. " * 40)
    assert run(
        store.send(
            store.write_call(
                JobWrite(
                    handle.id, claim.fence, "succeeded", fields={"result": answer}, events=[Event(type="succeeded")]
                )
            )
        )
    )
    short = client.submit(prompt="a short answer")
    short_claim = run(store.send(store.claim_call(short.id, "w1", 30)))
    assert run(
        store.send(
            store.write_call(
                JobWrite(
                    short.id,
                    short_claim.fence,
                    "succeeded",
                    fields={"result": JobResult(text="ok")},
                    events=[Event(type="succeeded")],
                )
            )
        )
    )
    run(store.pack_events(handle.id))
    key = store.keys.job(handle.id)
    before_events, before_record = list(client.events(handle.id)), client.get(handle.id)
    weight = int(redis_client.memory_usage(key, samples=0) or 0)
    packed = int(redis_client.hstrlen(key, "events"))

    assert store.archive_job(handle.id)
    assert not redis_client.hexists(key, "events") and redis_client.hget(key, "archived") == b"1"
    assert not redis_client.hexists(key, "result")  # a long result moved too
    assert int(redis_client.memory_usage(key, samples=0) or 0) < weight - packed // 2
    assert list(client.events(handle.id)) == before_events
    assert list(client.events(handle.id, follow=True)) == before_events
    assert client.get(handle.id) == before_record  # what `claudeq status` and get_job show: unchanged
    assert before_record.result == answer
    listed = {r.id: r for r in client.list(limit=10) if not isinstance(r, Exception)}
    assert listed[handle.id] == before_record  # `claudeq list --json` too (the results read in one query)
    short_before = client.get(short.id)
    assert store.archive_job(short.id)  # its events move; its short result stays in the record
    assert redis_client.hexists(store.keys.job(short.id), "result") and client.get(short.id) == short_before
    assert not store.archive_job(handle.id)  # moved once
    assert 0 < redis_client.ttl(key) <= arch_settings.result_ttl_s


def test_due_moves_are_taken_once(arch_settings: Settings, redis_client: redis.Redis) -> None:
    store = make_worker_store(arch_settings, redis_client)
    other = make_worker_store(arch_settings, redis_client)
    handle = Client(arch_settings, redis_client=redis_client).submit(prompt="due")
    assert run(store.schedule_archive(handle.id, 0, ["s-9"])) == ["s-9"]
    taken = run(store.due_archive()) + run(other.due_archive())
    assert sorted(taken) == [f"j:{handle.id}", "s:s-9"]
    run(store.archive_later("s:s-9", 3600))
    assert run(store.due_archive()) == [] and redis_client.zscore(store.keys.archive_due, "s:s-9")
    redis_client.delete(store.keys.archive_due)


def test_a_coding_jobs_patch_is_kept_per_job_until_its_retention(archive: SqlArchive, settings: Settings) -> None:
    prefix = settings.key_prefix
    archive.put_patch(prefix, "job-1", b"first attempt", time.time() + 30)
    archive.put_patch(prefix, "job-1", b"\x00second attempt", time.time() + 30)  # the latest attempt's replaces it
    assert archive.get_patch(prefix, "job-1") == b"\x00second attempt"
    assert archive.get_patch(prefix, "job-2") is None and archive.get_patch(prefix + "x", "job-1") is None
    assert archive.purge(prefix) == 0 and archive.get_patch(prefix, "job-1") is not None
    assert archive.purge(prefix, now=time.time() + 31) == 1 and archive.get_patch(prefix, "job-1") is None


def test_a_bad_archive_url_is_refused_with_the_setting(tmp_path: Path) -> None:
    from claudeq.errors import ConfigError

    with pytest.raises(ConfigError, match="archive_url"):
        SqlArchive("mysql://somewhere/db")
    with pytest.raises(ConfigError, match="archive_url"):
        SqlArchive("sqlite://")
    assert asyncio.iscoroutinefunction(RedisSessionStore.archive_session)


def test_claudeq_transcript_reads_a_job_session_from_redis_then_from_the_archive(
    monkeypatch: pytest.MonkeyPatch, arch_settings: Settings, redis_client: redis.Redis
) -> None:
    from typer.testing import CliRunner

    from claudeq.producer.cli import app

    for name, value in (
        ("CLAUDEQ_REDIS_URL", arch_settings.redis_url),
        ("CLAUDEQ_KEY_PREFIX", arch_settings.key_prefix),
        ("CLAUDEQ_ARCHIVE_URL", str(arch_settings.archive_url)),
    ):
        monkeypatch.setenv(name, value)
    client = Client(arch_settings, redis_client=redis_client)
    store = make_worker_store(arch_settings, redis_client)
    handle = client.submit(prompt="with a transcript")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    session = Event(type="session", attempt=1, data={"session_id": "s-7"})
    assert run(store.send(store.append_call(handle.id, claim.fence, [session])))
    assert run(
        store.send(store.write_call(JobWrite(handle.id, claim.fence, "succeeded", events=[Event(type="succeeded")])))
    )
    key: SessionKey = {"project_key": PROJECT, "session_id": "s-7"}

    async def write_then_move(move: bool) -> None:
        sessions = RedisSessionStore.from_settings(arch_settings, aioredis.Redis.from_url(arch_settings.redis_url))
        if move:
            await sessions.archive_session("s-7")
        else:
            await sessions.append(key, [entry(1, "what was asked"), entry(2, "the answer")])  # type: ignore[list-item]
        await sessions.aclose()

    runner = CliRunner()
    asyncio.run(write_then_move(False))
    from_redis = runner.invoke(app, ["transcript", handle.id, "--json"])
    assert from_redis.exit_code == 0, from_redis.output
    lines = [json.loads(line) for line in from_redis.output.splitlines()]
    assert [(x["session_id"], x["uuid"]) for x in lines] == [("s-7", "u-1"), ("s-7", "u-2")]
    asyncio.run(write_then_move(True))
    assert not redis_client.exists(store.keys.session_entries(PROJECT, "s-7"))
    from_archive = runner.invoke(app, ["transcript", handle.id, "--json"])
    assert from_archive.output == from_redis.output
    human = runner.invoke(app, ["transcript", handle.id])
    assert "session s-7 (2 entries)" in human.output and "user: the answer" in human.output
    assert runner.invoke(app, ["transcript", "no-such-job"]).exit_code != 0


def test_an_unreachable_archive_is_a_configuration_error_without_the_password() -> None:
    from claudeq.errors import ConfigError

    with pytest.raises(ConfigError, match="archive_url: the archive cannot be opened") as raised:
        SqlArchive("postgresql://claudeq:hunter2-secret@127.0.0.1:1/nowhere?connect_timeout=2")
    assert "hunter2-secret" not in str(raised.value)


def test_a_process_that_opened_the_postgresql_archive_exits_with_its_connection_closed() -> None:
    """open_archive keeps one archive per URL for the process's life (a worker's, a producer's, a CLI's): the process
    closes it on its way out rather than leave psycopg to find it open (a ResourceWarning on every exit)."""
    url = archive_url("postgresql", Path("."))
    code = f"from claudeq.archive import open_archive; print(open_archive({url!r}).kind)"
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=tree_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql"
    assert "ResourceWarning" not in done.stderr, done.stderr
