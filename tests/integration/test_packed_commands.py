"""The batch submit's hand-packed pipeline (claudeq/resp.py) on the real Redis: the same bytes redis-py sends, every
reply in order, an error reply raised only after all replies were read (the connection stays usable)."""

from __future__ import annotations

import pytest
import redis
from redis.connection import PythonRespSerializer

from claudeq.producer.client import Client
from claudeq.resp import execute_packed, pack_command, packed_capable

pytestmark = pytest.mark.integration


def test_a_packed_command_is_what_redis_py_sends() -> None:
    args: tuple[str | bytes | int | float, ...] = ("EVALSHA", "ab" * 20, 2, "k:1", "k:é", b"\x00raw", 0.1, 10**12, "")
    serializer = PythonRespSerializer(6000, redis.connection.Encoder("utf-8", "strict", False).encode)
    assert pack_command(*args) == b"".join(serializer.pack(*args))


def test_replies_come_in_order_and_an_error_reply_leaves_the_connection_usable(
    client: Client, redis_client: redis.Redis
) -> None:
    key = client.store.keys.job("packed-probe")
    assert packed_capable(redis_client)
    payload = pack_command("SET", key, "1") + pack_command("INCR", key) + pack_command("GET", key)
    assert execute_packed(redis_client, payload, 3)[1:] == [2, b"2"]
    bad = pack_command("SET", key, "x") + pack_command("INCR", key) + pack_command("GET", key)
    with pytest.raises(redis.ResponseError):
        execute_packed(redis_client, bad, 3)
    assert redis_client.get(key) == b"x"  # every reply was read: nothing is left on the connection
    assert execute_packed(redis_client, pack_command("GET", key), 1) == [b"x"]


def test_submit_many_through_the_packed_path_writes_what_single_submits_write(
    client: Client, redis_client: redis.Redis
) -> None:
    assert packed_capable(client.store.redis)
    [batch] = client.submit_many([{"prompt": "same", "metadata": {"n": 1}, "idempotency_key": "pk-1"}])
    single = client.submit(prompt="same", metadata={"n": 1})
    again = client.submit_many([{"prompt": "same", "idempotency_key": "pk-1"}])
    assert again[0].id == batch.id and not again[0].created
    a, b = client.get(batch.id), client.get(single.id)
    assert (a.status, a.spec.prompt, a.spec.metadata, a.fence) == (b.status, b.spec.prompt, b.spec.metadata, b.fence)
    stored = {k.decode() for k in redis_client.hkeys(client.store.keys.job(batch.id))}
    assert stored == {"status", "spec", "created_at", "idem"}
