"""Batch submit: every spec validated (a bad one named by index and field, nothing written), pipelined writes, one
broker message per created job in submit order; and the broker message claudeq pushes itself is the one Celery's
`send_task` would have written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis

from claudeq.broker import SENT_HEADER, job_id_of, list_for, queue_lists, run_message, sent_at_of
from claudeq.config.celery import TASK_RUN
from claudeq.errors import BatchSpecError, JobSpecError
from claudeq.producer.client import AsyncClient, Client

pytestmark = pytest.mark.integration

#: Fields that differ between any two messages (ids, the sending process, the reply address).
_PER_MESSAGE = {"id", "root_id", "argsrepr", "origin", "correlation_id", "reply_to", "delivery_tag", SENT_HEADER}


def _waiting(client: redis.Redis, queue: str) -> list[tuple[str, str]]:
    """(list name, job id) of every message waiting on the queue's lists, in the order a worker takes them."""
    out = []
    for name in queue_lists(queue):
        for raw in reversed(client.lrange(name, 0, -1)):
            out.append((name, job_id_of(raw) or "?"))
    return out


def _shape(message: dict[str, Any]) -> dict[str, Any]:
    headers = {k: v for k, v in message["headers"].items() if k not in _PER_MESSAGE}
    props = {k: v for k, v in message["properties"].items() if k not in _PER_MESSAGE}
    return {**{k: v for k, v in message.items() if k not in ("headers", "properties")}, "h": headers, "p": props}


@pytest.mark.parametrize("priority", [0, 3, 5, 9])
def test_pushed_message_is_the_one_send_task_writes(client: Client, redis_client: redis.Redis, priority: int) -> None:
    queue = client.settings.queue
    client.celery.send_task(TASK_RUN, args=["job-1"], queue=queue, priority=priority, task_id="job-1-abcdef01")
    [celery_list] = [name for name in queue_lists(queue) if redis_client.llen(name)]
    celery_message = json.loads(redis_client.rpop(celery_list) or b"{}")
    ours = run_message("job-1", queue, priority)
    assert list_for(queue, priority) == celery_list  # the same priority list
    assert _shape(json.loads(ours)) == _shape(celery_message)  # the same message, ids aside
    assert job_id_of(ours) == "job-1"
    assert sent_at_of(ours) is not None and sent_at_of(json.dumps(celery_message)) is None


def test_submit_many_refuses_the_whole_batch_and_names_each_bad_spec(client: Client, redis_client: redis.Redis) -> None:
    specs: list[Any] = [
        {"prompt": "fine"},
        {"prompt": ""},
        {"prompt": "fine too", "priority": 3},
        {"prompt": "x", "colour": "red"},
        {"prompt": "x", "max_turns": 0, "tools": "everything"},
    ]
    with pytest.raises(BatchSpecError) as info:
        client.submit_many(specs)
    error = info.value
    assert isinstance(error, JobSpecError)  # callers catching JobSpecError keep working
    assert error.indexes == [1, 3, 4]
    assert (3, "colour", "unknown field") in error.items
    assert {field for index, field, _ in error.items if index == 4} == {"max_turns", "tools"}
    assert any(field == "[1].prompt" for field, _ in error.errors)
    # Nothing of the batch was written or enqueued.
    assert list(redis_client.scan_iter(match=f"{client.settings.key_prefix}*", count=1000)) == []
    assert _waiting(redis_client, client.settings.queue) == []


def test_submit_many_writes_records_events_and_messages_in_order(client: Client, redis_client: redis.Redis) -> None:
    specs: list[Any] = [{"prompt": f"job {i}", "priority": 5 if i % 3 == 0 else 0} for i in range(1200)]
    specs[7] = {"prompt": "keyed", "idempotency_key": "k-1"}
    specs[8] = {"prompt": "keyed again", "idempotency_key": "k-1"}  # same key in the same batch: same job
    seen: list[int] = []
    handles = client.submit_many(specs, chunk_size=500, progress=seen.append)
    assert seen == [500, 1000, 1200]
    assert len(handles) == 1200
    assert handles[8].id == handles[7].id and (handles[7].created, handles[8].created) == (True, False)
    created = [h for h in handles if h.created]
    assert len({h.id for h in created}) == 1199
    for h, spec in zip(handles[:20], specs[:20], strict=True):
        record = client.get(h.id)
        assert (
            record.status == "queued" and record.spec.prompt == (specs[7] if h.id == handles[7].id else spec)["prompt"]
        )
    assert [e.type for e in client.events(handles[0].id)] == ["submitted"]
    waiting = _waiting(redis_client, client.settings.queue)
    # One message per created job, none for the duplicate key; each priority list in submit order.
    assert sorted(job for _, job in waiting) == sorted(h.id for h in created)
    for name in {name for name, _ in waiting}:
        in_list = [job for n, job in waiting if n == name]
        order = [h.id for h in created if h.id in set(in_list)]
        assert in_list == order
    assert client.store.redis.zcard(client.store.keys.queued) == 1199
    # Every job is in the jobs index (`claudeq list`) at its creation time, written by SUBMIT or without it.
    keys = client.store.keys
    for h in (handles[0], handles[7], handles[1199]):
        created_ms = client.get(h.id).created_at.timestamp() * 1000
        assert redis_client.zscore(keys.jobs, h.id) == pytest.approx(created_ms, abs=1)
    assert redis_client.zcard(keys.jobs) == 1199


def test_async_submit_many(client: Client, redis_client: redis.Redis) -> None:
    aclient = AsyncClient(client=client)
    handles = asyncio.run(aclient.submit_many([{"prompt": "a"}, {"prompt": "b"}]))
    assert [asyncio.run(h.record()).spec.prompt for h in handles] == ["a", "b"]
    with pytest.raises(BatchSpecError) as info:
        asyncio.run(aclient.submit_many([{"prompt": "ok"}, {"prompt": "ok", "priority": 12}]))
    assert info.value.indexes == [1]
    assert len(_waiting(redis_client, client.settings.queue)) == 2
