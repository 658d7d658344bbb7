"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from claudeq.config.settings import Settings


@pytest.fixture
async def aredis(redis_url: str, settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """An async client on the real Redis; every key under this test's prefix is removed afterwards."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    async for key in client.scan_iter(match=f"{settings.key_prefix}*", count=1000):
        await client.delete(key)
    await client.aclose()
