"""A job's events over its life: no stream while it has only `submitted` (made from the record), a stream while it
runs, then moved into the record when it finishes (the stream is deleted; the events expire with the record), with
`events`, `events --follow` and `status` reading one unbroken sequence throughout."""

from __future__ import annotations

import threading

import redis

from claudeq.models import Event
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import JobWrite, make_worker_store
from tests.support.aio import run


def test_stream_is_created_by_the_first_worker_event_and_compacted_at_the_end(
    client: Client, redis_client: redis.Redis
) -> None:
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="life cycle")
    events_key = store.keys.events(handle.id)
    assert not redis_client.exists(events_key)  # queued with only `submitted`: no stream
    [submitted] = list(client.events(handle.id))
    assert submitted.type == "submitted" and submitted.data == {"queue": client.settings.queue}
    assert submitted.at == client.get(handle.id).created_at

    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    store.append_event(handle.id, Event(type="claimed", attempt=1))
    assert redis_client.exists(events_key)
    seen: list[str] = []
    follower = threading.Thread(target=lambda: seen.extend(e.type for e in client.events(handle.id, follow=True)))
    follower.start()
    for kind in ("run_started", "assistant_text", "result"):
        store.append_event(handle.id, Event(type=kind, attempt=1))
    store.append_event(handle.id, Event(type="succeeded"))
    assert run(store.send(store.write_call(JobWrite(handle.id, claim.fence, "succeeded"))))
    follower.join(timeout=30)
    assert not follower.is_alive()
    expected = ["submitted", "claimed", "run_started", "assistant_text", "result", "succeeded"]
    assert seen == expected

    assert not redis_client.exists(events_key)  # moved into the record ...
    assert redis_client.hexists(store.keys.job(handle.id), "events")
    assert 0 < redis_client.ttl(store.keys.job(handle.id)) <= client.settings.result_ttl_s  # ... which expires
    assert [e.type for e in client.events(handle.id)] == expected
    assert [e.type for e in client.events(handle.id, follow=True)] == expected
    ids = [entry_id for entry_id, _ in store.read_events(handle.id)]
    assert [e.type for _, e in store.read_events(handle.id, after=ids[2])] == expected[3:]  # cursors still work
    assert client.get(handle.id).status == "succeeded" and run_call(store.status_call(handle.id)) == "succeeded"


def test_cancelled_while_queued_leaves_no_stream(client: Client, redis_client: redis.Redis) -> None:
    handle = client.submit(prompt="cancel me")
    assert client.cancel(handle.id) == "cancelled"
    assert not redis_client.exists(client.store.keys.events(handle.id))
    assert [e.type for e in client.events(handle.id, follow=True)] == ["submitted", "cancelled"]


def test_a_queued_job_costs_no_stream_memory(client: Client, redis_client: redis.Redis) -> None:
    handles = client.submit_many([{"prompt": f"job {i}"} for i in range(50)])
    assert not any(redis_client.exists(client.store.keys.events(h.id)) for h in handles)
    record_bytes = max(int(redis_client.memory_usage(client.store.keys.job(h.id)) or 0) for h in handles)
    assert record_bytes < 2048, record_bytes  # a one-event stream alone cost ~4.7 KB


def test_events_a_terminal_write_brings_go_straight_into_the_record_after_the_stream(
    client: Client, redis_client: redis.Redis
) -> None:
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="packed at the end")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    assert run(
        store.send(
            store.append_call(
                handle.id, claim.fence, [Event(type="claimed", attempt=1), Event(type="run_started", attempt=1)]
            )
        )
    )
    streamed = [entry_id for entry_id, _ in store.read_events(handle.id)]
    seen: list[str] = []
    follower = threading.Thread(target=lambda: seen.extend(e.type for e in client.events(handle.id, follow=True)))
    follower.start()
    tail = [Event(type="assistant_text", attempt=1, data={"text": "done"}), Event(type="result", attempt=1)]
    assert run(
        store.send(
            store.write_call(JobWrite(handle.id, claim.fence, "succeeded", events=[*tail, Event(type="succeeded")]))
        )
    )
    follower.join(timeout=30)
    assert not follower.is_alive()

    expected = ["submitted", "claimed", "run_started", "assistant_text", "result", "succeeded"]
    assert seen == expected
    assert not redis_client.exists(store.keys.events(handle.id))
    read = store.read_events(handle.id)
    assert [e.type for _, e in read] == expected
    assert [entry_id for entry_id, _ in read[:3]] == streamed  # the stream's entries keep their ids
    ids = [entry_id for entry_id, _ in read]
    keys = [tuple(int(part) for part in entry_id.split("-")) for entry_id in ids]
    assert keys == sorted(keys) and len(set(ids)) == len(ids)  # the packed ones come after, in order
    assert [e.type for _, e in store.read_events(handle.id, after=ids[3])] == expected[4:]
    assert read[3][1].data == {"text": "done"}


def test_a_terminal_write_of_a_job_without_a_stream_packs_its_events(client: Client, redis_client: redis.Redis) -> None:
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="never streamed")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    assert run(
        store.send(
            store.write_call(
                JobWrite(handle.id, claim.fence, "failed", events=[Event(type="claimed"), Event(type="failed")])
            )
        )
    )
    assert [e.type for e in client.events(handle.id)] == ["submitted", "claimed", "failed"]
    assert not redis_client.exists(store.keys.events(handle.id))


def test_several_events_go_in_one_fenced_append_in_order_and_a_stale_fence_appends_none(
    client: Client, redis_client: redis.Redis
) -> None:
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="batched")
    old = run(store.send(store.claim_call(handle.id, "w1", 30)))
    batch = [Event(type="assistant_text", data={"text": str(i)}) for i in range(5)]
    assert run(store.send(store.append_call(handle.id, old.fence, batch)))
    redis_client.zadd(store.keys.running, {handle.id: 0})
    assert run(store.recover(handle.id, old.fence, None))
    assert run(store.send(store.claim_call(handle.id, "w2", 30))).ok
    assert (
        run(store.send(store.append_call(handle.id, old.fence, [Event(type="assistant_text", data={"text": "x"})])))
        is None
    )
    texts = [e.data["text"] for _, e in store.read_events(handle.id) if e.type == "assistant_text"]
    assert texts == ["0", "1", "2", "3", "4"]


def test_finished_events_packed_by_the_worker_read_back_the_same(client: Client, redis_client: redis.Redis) -> None:
    """The worker that finished a job compresses the events the status script compacted as JSON: `events`,
    cursors and `status` read the same events, and the record is smaller by what zlib saves."""
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="packed after the end")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    tool_output = "".join(f"line {n}: def handler(x): return x * {n}\n" for n in range(200))
    events = [
        Event(type="claimed", attempt=1),
        Event(type="tool_result", attempt=1, data={"text": tool_output[:1000], "chars": len(tool_output)}),
        Event(type="assistant_text", attempt=1, data={"text": "The handler multiplies. " * 40}),
    ]
    assert run(store.send(store.append_call(handle.id, claim.fence, events)))
    assert run(
        store.send(store.write_call(JobWrite(handle.id, claim.fence, "succeeded", events=[Event(type="succeeded")])))
    )
    key = store.keys.job(handle.id)
    before = list(client.events(handle.id))
    plain = redis_client.hget(key, "events")
    assert isinstance(plain, bytes) and plain.startswith(b"[")
    ttl = redis_client.ttl(key)

    saved = run(store.pack_events(handle.id))
    packed = redis_client.hget(key, "events")
    assert isinstance(packed, bytes) and not packed.startswith(b"[")
    assert saved == len(plain) - len(packed) and len(packed) < len(plain) / 2
    assert list(client.events(handle.id)) == before
    assert list(client.events(handle.id, follow=True)) == before
    ids = [entry_id for entry_id, _ in store.read_events(handle.id)]
    assert [e.type for _, e in store.read_events(handle.id, after=ids[1])] == [e.type for e in before[2:]]
    assert 0 < redis_client.ttl(key) <= ttl  # the record keeps its expiry
    assert run(store.pack_events(handle.id)) == 0  # already packed: nothing to do


def test_events_changed_since_read_are_not_replaced(client: Client, redis_client: redis.Redis) -> None:
    """The pack script replaces the field only if it is still the JSON that was compressed."""
    store = make_worker_store(client.settings, redis_client)
    handle = client.submit(prompt="changed meanwhile")
    claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
    assert run(store.send(store.append_call(handle.id, claim.fence, [Event(type="claimed", attempt=1)] * 20)))
    assert run(
        store.send(store.write_call(JobWrite(handle.id, claim.fence, "succeeded", events=[Event(type="succeeded")])))
    )
    key = store.keys.job(handle.id)
    plain = redis_client.hget(key, "events")
    assert isinstance(plain, bytes)
    replaced = store._pack_events(keys=[key], args=[plain + b" ", b"x\x9c"])
    assert int(replaced) == 0 and redis_client.hget(key, "events") == plain


def test_a_terminal_write_without_a_stream_brings_its_events_packed(client: Client, redis_client: redis.Redis) -> None:
    """`pack`: the write stores the compacted events packed at once (no read and PACK_EVENTS after it), and they read
    back as the same events, with the same ids, as the JSON the script compacts without it."""
    store = make_worker_store(client.settings, redis_client)
    text = "The handler multiplies. " * 40
    tail = [
        Event(type="claimed", attempt=1),
        Event(type="assistant_text", attempt=1, data={"text": text + 'é/\u007f"\\'}),
        Event(type="result", attempt=1),
    ]
    read: dict[bool, list[tuple[str, Event]]] = {}
    for pack in (False, True):
        handle = client.submit(prompt=f"packed by the write: {pack}")
        claim = run(store.send(store.claim_call(handle.id, "w1", 30)))
        assert run(
            store.send(
                store.write_call(
                    JobWrite(
                        handle.id,
                        claim.fence,
                        "succeeded",
                        events=[*tail, Event(type="succeeded")],
                        stream=False,
                        pack=pack,
                    )
                )
            )
        )
        raw = redis_client.hget(store.keys.job(handle.id), "events")
        assert isinstance(raw, bytes) and raw.startswith(b"[") != pack
        assert (run(store.pack_events(handle.id)) == 0) == pack  # packed by the write: nothing left to pack
        read[pack] = store.read_events(handle.id)
        assert [e.type for e in client.events(handle.id)] == [
            "submitted",
            "claimed",
            "assistant_text",
            "result",
            "succeeded",
        ]
    assert [(e.type, e.attempt, e.data) for _, e in read[True]] == [(e.type, e.attempt, e.data) for _, e in read[False]]
    assert [entry_id.split("-")[1] for entry_id, _ in read[True][-4:]] == ["0", "1", "2", "3"]
