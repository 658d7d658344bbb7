"""Pipelined commands packed by hand: for the batch submit, where redis-py's per-argument packing cost more than
everything else a job's write needs (a CREATE call carries ~25 arguments).

`execute_packed` sends a payload of several RESP commands on one pooled connection and reads every reply in order,
like a non-transactional pipeline. Only for plain redis-py clients (`packed_capable`); anything else (fakeredis,
wrappers) keeps the ordinary pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection

_PLAIN = (Connection, SSLConnection, UnixDomainSocketConnection)
T_co = TypeVar("T_co", covariant=True)


def _arg(value: str | bytes | int | float) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, float):
        return repr(value).encode()  # as redis-py encodes a float
    return str(value).encode()


def pack_command(*args: str | bytes | int | float) -> bytes:
    """One command in RESP (an array of bulk strings), as redis-py would send it."""
    parts = [b"*%d\r\n" % len(args)]
    for value in args:
        data = _arg(value)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def packed_capable(client: Any) -> bool:
    """Whether `client` is a plain redis-py client whose connections can take a packed payload."""
    return isinstance(client, redis.Redis) and issubclass(client.connection_pool.connection_class, _PLAIN)


def execute_packed(client: redis.Redis, payload: bytes, count: int) -> list[Any]:
    """Send `payload` (`count` packed commands) and return their replies in order. An error reply raises, after
    every reply was read (the connection stays usable); a connection error drops the connection."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command([payload])  # type: ignore[no-untyped-call]
        replies: list[Any] = []
        error: redis.ResponseError | None = None
        for _ in range(count):
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
                error = error or exc
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(conn)
    if error is not None:
        raise error
    return replies


@dataclass(frozen=True)
class PackedCall(Generic[T_co]):
    """Packed commands sent together (`execute_packed`, one round trip): a store's operation as data, like
    `claudeq.script_calls.PipeCall`, for one too large for redis-py's packing (`JobStore.submit_many_call`); sent by
    `claudeq.script_calls.run_call`. `parse` makes their replies (in order) into the answer."""

    client: redis.Redis
    commands: list[bytes]
    parse: Callable[[list[Any]], T_co]

    def send(self) -> T_co:
        """Send the commands on the client's pool and parse their replies."""
        return self.parse(execute_packed(self.client, b"".join(self.commands), len(self.commands)))
