"""RedisSessionStore on a real Redis: the SDK's conformance suite with nothing skipped, races and real expiry."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.transcripts import RedisSessionStore

pytestmark = pytest.mark.integration

KEY: SessionKey = {"project_key": "-tmp-work", "session_id": "0b5cf1d6-5a0e-4d6f-8a3c-2f7e9b1d4c00"}


async def test_conformance_suite_passes_on_real_redis(aredis: aioredis.Redis, settings: Settings) -> None:
    def make_store() -> RedisSessionStore:
        # Each contract gets its own sub-prefix under this test's prefix (cleaned up by the fixture).
        return RedisSessionStore(aredis, Keys(f"{settings.key_prefix}{uuid.uuid4().hex[:6]}:"), 600)

    await run_session_store_conformance(make_store, skip_optional=frozenset())


async def test_racing_appends_from_two_clients_lose_nothing(
    aredis: aioredis.Redis, redis_url: str, settings: Settings
) -> None:
    other_client = aioredis.Redis.from_url(redis_url)
    stores = [
        RedisSessionStore.from_settings(settings, aredis),
        RedisSessionStore.from_settings(settings, other_client),
    ]

    async def writer(store: RedisSessionStore, tag: str) -> None:
        for i in range(25):
            await store.append(KEY, [{"type": "user", "uuid": f"{tag}-{i}", "lastPrompt": f"{tag}{i}"}])  # type: ignore[typeddict-unknown-key]
            await store.append(KEY, [{"type": "user", "uuid": f"{tag}-{i}"}])  # a retried batch: deduplicated

    try:
        await asyncio.gather(writer(stores[0], "a"), writer(stores[1], "b"))
    finally:
        await other_client.aclose()
    loaded = await stores[0].load(KEY)
    assert loaded is not None and len(loaded) == 50
    [summary] = await stores[0].list_session_summaries(KEY["project_key"])
    assert summary["data"]["last_prompt"] == loaded[-1]["lastPrompt"]  # type: ignore[typeddict-item]


async def test_transcript_expires_after_the_retention_ttl(aredis: aioredis.Redis, settings: Settings) -> None:
    store = RedisSessionStore(aredis, Keys(settings.key_prefix), ttl_s=1)
    await store.append(KEY, [{"type": "user", "uuid": "u1"}])
    await store.append({**KEY, "subpath": "subagents/agent-1"}, [{"type": "user", "uuid": "s1"}])
    assert await store.load(KEY) is not None
    await asyncio.sleep(2.2)
    assert await store.load(KEY) is None
    assert await store.list_sessions(KEY["project_key"]) == []
    assert [k async for k in aredis.scan_iter(match=f"{settings.key_prefix}*")] == []
