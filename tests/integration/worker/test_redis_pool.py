"""A worker's Redis connection pool holds every call its engine can make at once.

The sync pool is sized for every call the engine may have in flight at once (`engine_executor_workers`; the async
client's pool has the same size). redis-py's pool refuses a connection past its size with MaxConnectionsError (100
by default since redis-py 6): a worker at a concurrency of a few hundred then lost claims, writes and slot releases
under load, each "left to the reconciler". Every call the engine can have in flight must get a connection.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from claudeq.config.settings import Settings
from claudeq.worker.app import build_runtime
from claudeq.worker.delivery.engine import engine_executor_workers
from tests.conftest import make_settings

pytestmark = pytest.mark.integration


def test_every_engine_thread_gets_a_redis_connection_at_once(redis_url: str, unique: str) -> None:
    settings: Settings = make_settings(redis_url, unique, concurrency=60)
    runtime = build_runtime(settings, worker_id=f"pool-test-{unique}")
    store = runtime.engine.store
    calls = engine_executor_workers(settings.concurrency)
    assert calls > 100  # past redis-py's default pool size
    key = f"{settings.key_prefix}nothing-{uuid.uuid4().hex[:6]}"

    async def all_at_once() -> list[object]:
        # Each call holds its connection for 0.5 s (a blocking pop on an empty list): all of them at once.
        return await asyncio.gather(
            *(asyncio.to_thread(store.redis.execute_command, "BLPOP", key, 0.5) for _ in range(calls)),
            return_exceptions=True,
        )

    try:
        runtime.engine.start()
        results = runtime.engine.call(all_at_once()).result(timeout=60)
    finally:
        runtime.engine.stop()
        store.redis.close()
    failed = [r for r in results if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} of {calls} calls failed, e.g. {failed[0]!r}"
    assert results == [None] * calls
