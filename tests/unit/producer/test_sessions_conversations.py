"""Conversations on fakeredis: pointer and turns, the turn lock (FIFO, re-entrant, stale holders) and deletion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore, Turn, delete_conversation
from claudeq.jobs import JobStore
from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec
from claudeq.script_calls import run_call
from claudeq.transcripts import RedisSessionStore

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def convs(fake_redis: fakeredis.FakeRedis, fake_settings: Settings) -> ConversationStore:
    return ConversationStore(fake_redis, Keys(fake_settings.key_prefix), ttl_s=600)


def _job(store: JobStore, job_id: str, created: datetime, status: str = "queued", conv: str = "c") -> JobRecord:
    record = JobRecord(id=job_id, spec=JobSpec(prompt="hi", conversation=conv), status="queued", created_at=created)
    run_call(store.create_call(record))
    if status != "queued":
        store.redis.hset(store.keys.job(job_id), "status", status)
    return record


def test_second_turn_waits_for_the_running_one_and_is_named_on_release(
    convs: ConversationStore, fake_store: JobStore
) -> None:
    _job(fake_store, "a", T0, "running")
    _job(fake_store, "b", T0 + timedelta(seconds=1), "running")
    assert run_call(convs.acquire_call("c", "a")).granted
    grant = run_call(convs.acquire_call("c", "b"))
    assert not grant.granted and grant.holder == "a"
    assert run_call(convs.acquire_call("c", "a")).granted  # re-entrant: a retry of the running turn
    fake_store.redis.hset(fake_store.keys.job("b"), "status", "deferred")
    fake_store.redis.hset(fake_store.keys.job("a"), "status", "succeeded")  # written before the release
    assert run_call(convs.release_call("c", "a")) == "b"
    assert run_call(convs.acquire_call("c", "b")).granted


def test_turns_run_in_submit_order_even_when_the_later_one_is_claimed_first(
    convs: ConversationStore, fake_store: JobStore
) -> None:
    _job(fake_store, "a", T0)
    _job(fake_store, "b", T0 + timedelta(seconds=1), "running")
    convs.register("c", "a")  # at submit
    convs.register("c", "b")
    grant = run_call(convs.acquire_call("c", "b"))
    assert not grant.granted and grant.holder == "a"
    assert run_call(convs.acquire_call("c", "a")).granted


def test_an_earlier_turn_claimed_but_not_yet_planned_goes_first(convs: ConversationStore, fake_store: JobStore) -> None:
    _job(fake_store, "a", T0, "running")  # submitted first (numbered by CREATE), claimed, not planned yet
    _job(fake_store, "b", T0 + timedelta(seconds=1), "running")
    fake_store.redis.zadd(fake_store.keys.running, {"a": 1.0, "b": 1.0})
    _job(fake_store, "0-other", T0, conv="other")  # another conversation's job: ignored
    grant = run_call(convs.acquire_call("c", "b"))
    assert not grant.granted and grant.holder == "a"
    assert run_call(convs.acquire_call("c", "a")).granted


def test_a_finished_or_vanished_holder_never_blocks_the_next_turn(
    convs: ConversationStore, fake_store: JobStore
) -> None:
    _job(fake_store, "a", T0, "running")
    _job(fake_store, "b", T0 + timedelta(seconds=1), "running")
    assert run_call(convs.acquire_call("c", "a")).granted
    fake_store.redis.hset(fake_store.keys.job("a"), "status", "failed")  # finished without releasing
    assert run_call(convs.acquire_call("c", "b")).granted
    fake_store.redis.delete(fake_store.keys.job("b"))  # record expired
    assert run_call(convs.acquire_call("c", "z")).granted


def test_pointer_moves_on_turns_but_not_on_forks(convs: ConversationStore) -> None:
    run_call(
        convs.record_turn_call(
            "c", Turn(job_id="a", status="succeeded", session_id="s1", finished_at=T0), move_pointer=True
        )
    )
    run_call(
        convs.record_turn_call(
            "c", Turn(job_id="b", status="succeeded", session_id="s2", forked=True, finished_at=T0), move_pointer=False
        )
    )
    info = convs.info("c")
    assert info is not None and info.session_id == "s1"
    assert [t.job_id for t in info.turns] == ["a", "b"]
    assert convs.names() == ["c"]
    assert convs.info("never") is None


def test_every_conversation_key_expires_with_the_retention(
    convs: ConversationStore, fake_store: JobStore, fake_redis: fakeredis.FakeRedis
) -> None:
    _job(fake_store, "a", T0, "running")
    run_call(convs.acquire_call("c", "a"))
    convs.register("c", "b")
    run_call(
        convs.record_turn_call(
            "c", Turn(job_id="a", status="succeeded", session_id="s1", finished_at=T0), move_pointer=True
        )
    )
    for key in (
        convs.keys.conversation("c"),
        convs.keys.conversation_turns("c"),
        convs.keys.conversation_lock("c"),
        convs.keys.conversation_waiters("c"),
    ):
        assert 0 < fake_redis.ttl(key) <= 600, key


async def test_delete_removes_pointer_turns_and_transcripts(convs: ConversationStore, fake_settings: Settings) -> None:
    aredis = fakeredis.FakeAsyncRedis(server=convs.redis.connection_pool.connection_kwargs["server"])
    sessions = RedisSessionStore(aredis, convs.keys, 600)
    await sessions.append({"project_key": "p", "session_id": "s1"}, [{"type": "user", "uuid": "u"}])
    await sessions.append({"project_key": "p", "session_id": "s2"}, [{"type": "user", "uuid": "u"}])
    run_call(
        convs.record_turn_call(
            "c", Turn(job_id="a", status="succeeded", session_id="s1", finished_at=T0), move_pointer=True
        )
    )
    assert await delete_conversation(convs, sessions, "c") == ["s1"]
    assert convs.info("c") is None
    assert await sessions.load({"project_key": "p", "session_id": "s1"}) is None
    assert await sessions.load({"project_key": "p", "session_id": "s2"}) is not None  # not this conversation's


def test_turns_run_through_the_worker_in_submit_order_each_resuming_the_last(claudeq_fleet: Any) -> None:
    """The whole path on claudeq.testing's fleet: the producer's submits, the worker's turn lock and session plan."""
    claudeq_fleet.reply(lambda run: f"answer to {run.prompt}")
    handles = [claudeq_fleet.client.submit(prompt=f"turn {i}", conversation="chat") for i in range(3)]
    claudeq_fleet.run_until_idle()
    records = [claudeq_fleet.record(h.id) for h in handles]
    assert [r.status for r in records] == ["succeeded"] * 3
    assert [run.spec.prompt for run in claudeq_fleet.runs] == ["turn 0", "turn 1", "turn 2"]
    assert [run.resume for run in claudeq_fleet.runs] == [None, records[0].session_id, records[1].session_id]
    assert [r.session_plan.mode if r.session_plan else None for r in records] == ["new", "resume", "resume"]
