"""AsyncClient: the same producer API for asyncio code, with awaitable handles."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError, JobTimeout
from claudeq.producer.client import AsyncClient, Client
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore


class RecordingCelery:
    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def send_task(self, name: str, **kwargs: Any) -> None:
        self.sent.append(kwargs["args"])


@pytest.fixture
def aclient(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> AsyncClient:
    return AsyncClient(client=Client(fake_settings, redis_client=fake_redis, celery_app=RecordingCelery()))


async def test_submit_wait_and_events(aclient: AsyncClient) -> None:
    handle = await aclient.submit(prompt="hello")
    assert handle.created
    with pytest.raises(JobTimeout):
        await handle.wait(timeout=0.1, poll_s=0.02)

    async def worker() -> None:
        store = WorkerJobStore(
            aclient.sync.store.redis,
            aclient.sync.store.keys,
            result_ttl_s=aclient.sync.store.result_ttl_s,
            events_maxlen=aclient.sync.store.events_maxlen,
        )
        claim = await store.send(store.claim_call(handle.id, "w", 5))
        await asyncio.sleep(0.1)
        await store.send(store.write_call(JobWrite(handle.id, claim.fence, "succeeded")))

    record, _ = await asyncio.gather(handle.wait(timeout=5, poll_s=0.02), worker())
    assert record.status == "succeeded"
    assert [e.type async for e in handle.events(follow=True)] == ["submitted"]
    assert (await handle.record()).status == "succeeded"


async def test_cancel_and_list(aclient: AsyncClient) -> None:
    handle = await aclient.submit(prompt="cancel me")
    assert await handle.cancel() == "cancelled"
    listed = await aclient.list(status="cancelled")
    assert [r.id for r in listed if not isinstance(r, Exception)] == [handle.id]
    assert (await aclient.handle(handle.id).record()).status == "cancelled"


async def test_bad_spec_raises_before_anything_is_written(aclient: AsyncClient) -> None:
    with pytest.raises(JobSpecError) as info:
        await aclient.submit(prompt="")
    assert info.value.field == "prompt"
    assert aclient.sync.store.redis.keys("*") == []
