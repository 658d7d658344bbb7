"""Conversation turns on a real Redis: registered in submit order by the CREATE script, and a turn-lock script that
does bounded work (no spec decoding, whatever the backlog) — counted in Redis's own command statistics on a
private server, so nothing else running on the shared Redis can blur the count."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.conftest import make_settings
from tests.support.redis_server import PrivateRedis

pytestmark = pytest.mark.integration


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    yield server
    server.stop()


def _settings(url: str, unique: str) -> Settings:
    base = make_settings(url, unique)
    return base.model_copy(update={"queues": [base.queue, f"{base.queue}-idle"]})


def test_turns_keep_submit_order_past_500_other_queued_jobs(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    client.submit_many([{"prompt": f"unrelated {i}"} for i in range(600)])  # older than both turns
    first = client.submit(prompt="turn one", conversation="chat")
    second = client.submit(prompt="turn two", conversation="chat")
    conversations = ConversationStore.from_settings(settings, redis_client)

    grant = run_call(conversations.acquire_call("chat", second.id))  # the later turn is claimed first

    assert not grant.granted and grant.holder == first.id
    assert run_call(conversations.acquire_call("chat", first.id)).granted


def test_600_queued_turns_are_ordered_by_submit_and_run_one_by_one(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    handles = client.submit_many([{"prompt": f"turn {i}", "conversation": "long"} for i in range(600)])
    ids = [h.id for h in handles]
    conversations = ConversationStore.from_settings(settings, redis_client)
    info = conversations.info("long")
    assert info is not None and info.waiting == ids

    for later in (ids[-1], ids[550], ids[1]):
        grant = run_call(conversations.acquire_call("long", later))
        assert not grant.granted and grant.holder == ids[0]
    assert run_call(conversations.acquire_call("long", ids[0])).granted
    assert run_call(conversations.acquire_call("long", ids[1])).holder == ids[0]  # the holder runs: everyone else waits
    redis_client.hset(client.store.keys.job(ids[0]), "status", "succeeded")
    assert run_call(conversations.release_call("long", ids[0])) == ids[1]  # the next turn in submit order is named
    assert run_call(conversations.acquire_call("long", ids[1])).granted


def test_a_cancelled_queued_turn_leaves_the_order(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    first = client.submit(prompt="turn one", conversation="chat")
    second = client.submit(prompt="turn two", conversation="chat")
    assert client.cancel(first.id) == "cancelled"
    conversations = ConversationStore.from_settings(settings, redis_client)
    info = conversations.info("chat")
    assert info is not None and info.waiting == [second.id]
    assert run_call(conversations.acquire_call("chat", second.id)).granted


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def test_the_turn_lock_does_bounded_work_whatever_the_backlog(private_redis: PrivateRedis, unique: str) -> None:
    settings = _settings(private_redis.url, unique)
    client = Client(settings)
    big = "x" * 100_000  # big specs: decoding each one in Lua is what made an acquire take seconds
    client.submit_many([{"prompt": f"{big} other {i}"} for i in range(300)])
    handles = client.submit_many([{"prompt": f"{big} turn {i}", "conversation": "chat"} for i in range(300)])
    ids = [h.id for h in reversed(handles)]  # newest first
    conn = redis.Redis.from_url(private_redis.url)
    for job_id in ids[:150]:
        conn.hset(client.store.keys.job(job_id), "status", "running")
        conn.zadd(client.store.keys.running, {job_id: time.time() + 60})
    conversations = ConversationStore.from_settings(settings, conn)
    run_call(conversations.acquire_call("chat", ids[0]))  # loads the script

    before = _calls(conn)
    grant = run_call(conversations.acquire_call("chat", ids[0]))
    after = _calls(conn)

    assert not grant.granted
    spent = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    redis_calls = sum(n for name, n in spent.items() if name not in ("evalsha", "eval", "info"))
    assert redis_calls <= 12, spent  # a handful of O(log n) commands, not one HGET per queued job
    assert spent.get("hget", 0) <= 3, spent
    client.store.redis.close()
    conn.close()
