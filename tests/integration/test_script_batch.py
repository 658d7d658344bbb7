"""Script calls on the engine loop's async client go to Redis in batches: the calls made in one turn of the loop
share one pipeline, each gets its own reply (or its own error), scripts a restarted Redis forgot are loaded again,
and a connection error fails every call of the batch. Real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
import redis.asyncio

from claudeq.script_calls import AsyncCalls, ScriptCall
from tests.support.redis_server import command_calls, commands_since

pytestmark = pytest.mark.integration

INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
FAIL = "return redis.error_reply('refused ' .. ARGV[1])"


class Store(AsyncCalls):
    def __init__(self, client: redis.Redis) -> None:
        self.incr = client.register_script(INCR)
        self.fail = client.register_script(FAIL)

    async def aincr(self, key: str, by: int) -> int:
        assert self._async is not None
        return await self.send(ScriptCall(self.incr, [key], [by], int))

    async def afail(self, why: str) -> None:
        assert self._async is not None
        await self.send(ScriptCall(self.fail, [], [why], lambda reply: None))


def test_calls_of_one_turn_share_a_pipeline_and_get_their_own_replies(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    store = Store(sync)
    key = f"batch-test:{uuid.uuid4().hex}"

    name = f"batch-{uuid.uuid4().hex[:8]}"
    connections: list[int] = []

    async def burst() -> list[object]:
        client = redis.asyncio.Redis.from_url(redis_url, client_name=name)
        store.use_async(client)
        try:
            await store.aincr(key, 0)  # the scripts are loaded
            calls = [store.aincr(key, n) for n in range(1, 51)] + [store.afail("this one")]
            replies = await asyncio.gather(*calls, return_exceptions=True)
            connections.append(sum(1 for c in sync.client_list() if c.get("name") == name))
            return replies
        finally:
            await client.aclose()

    before = command_calls(sync)
    replies = asyncio.run(burst())
    cost = commands_since(sync, before)
    # 51 calls at once went on one connection: one pipeline, not a connection (and a round trip) each.
    assert connections == [1]

    # Each call its own reply, in the order the increments ran; the failing call alone got an error.
    assert replies[:50] == [n * (n + 1) // 2 for n in range(1, 51)]
    assert isinstance(replies[50], redis.ResponseError) and "refused this one" in str(replies[50])
    assert int(sync.get(key) or 0) == 1275
    assert cost.get("evalsha", 0) >= 52 and cost.get("incrby", 0) >= 51, cost
    sync.delete(key)


def test_scripts_a_flushed_redis_forgot_are_loaded_again(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    store = Store(sync)
    key = f"batch-test:{uuid.uuid4().hex}"
    sync.script_flush()  # as after a restart: no script is known

    async def burst() -> list[int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        store.use_async(client)
        try:
            single = await store.aincr(key, 1)  # alone in its turn
            sync.script_flush()
            return [single, *await asyncio.gather(*(store.aincr(key, 1) for _ in range(5)))]
        finally:
            await client.aclose()

    assert asyncio.run(burst()) == [1, 2, 3, 4, 5, 6]
    sync.delete(key)


def test_a_connection_error_fails_every_call_of_the_batch() -> None:
    store = Store(redis.Redis.from_url("redis://127.0.0.1:9"))

    async def burst() -> list[object]:
        client = redis.asyncio.Redis.from_url("redis://127.0.0.1:9", socket_connect_timeout=1)  # nothing listens
        store.use_async(client)
        try:
            return await asyncio.gather(*(store.aincr("k", 1) for _ in range(3)), return_exceptions=True)
        finally:
            await client.aclose()

    replies = asyncio.run(burst())
    assert len(replies) == 3 and all(isinstance(r, redis.ConnectionError) for r in replies), replies
