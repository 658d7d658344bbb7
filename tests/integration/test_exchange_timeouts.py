"""A script batch's exchange on one pooled connection (claudeq/script_calls.py `_exchange`) times its reads as
redis-py's `read_response` does: each reply may take up to `socket_timeout`, however long the batch takes in all; a
reply that does not come ends the exchange with redis' TimeoutError and the connection dropped; a cancel from
outside stays a cancel. Run through a proxy to the real Redis that can hold back or slow down its replies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
import redis
import redis.asyncio as aioredis

from claudeq.script_calls import _exchange

pytestmark = pytest.mark.integration

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


class _Proxy:
    """Forwards to Redis; `mode`: pass, hold (no reply comes) or slow (each reply 0.3 s after the last)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.mode = "pass"
        self.tasks: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def up() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()

        async def down() -> None:
            while data := await up_reader.read(65536):
                if self.mode == "hold":
                    continue
                step = len(PONG) if self.mode == "slow" else len(data)
                for i in range(0, len(data), step):
                    if self.mode == "slow":
                        await asyncio.sleep(0.3)
                    writer.write(data[i : i + step])
                    await writer.drain()

        both = [asyncio.create_task(up()), asyncio.create_task(down())]
        self.tasks.update(both)
        try:
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in both:
                task.cancel()
            writer.close()
            up_writer.close()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[tuple[_Proxy, int]]:
    url = urlparse(redis_url)
    proxy = _Proxy(url.hostname or "127.0.0.1", url.port or 6379)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    yield proxy, server.sockets[0].getsockname()[1]
    server.close()
    for task in proxy.tasks:
        task.cancel()


async def _connected(proxy: _Proxy, port: int) -> aioredis.Connection:
    proxy.mode = "pass"
    conn = aioredis.Connection(host="127.0.0.1", port=port, socket_timeout=0.5)
    await conn.connect()
    return conn


async def test_replies_each_within_the_timeout_are_read_however_long_the_batch_takes(
    proxy: tuple[_Proxy, int],
) -> None:
    p, port = proxy
    conn = await _connected(p, port)
    p.mode = "slow"
    started = time.monotonic()
    assert await _exchange(conn, PING * 4, 4) == [b"PONG"] * 4
    assert time.monotonic() - started > 1.0 and conn.is_connected
    await conn.disconnect()


async def test_a_reply_that_does_not_come_times_out_and_drops_the_connection(proxy: tuple[_Proxy, int]) -> None:
    p, port = proxy
    conn = await _connected(p, port)
    p.mode = "hold"
    with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
        await _exchange(conn, PING * 2, 2)
    assert not conn.is_connected
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # the timeout's own cancel was taken back


async def test_a_cancel_from_outside_stays_a_cancel(proxy: tuple[_Proxy, int]) -> None:
    p, port = proxy
    conn = await _connected(p, port)
    p.mode = "hold"
    exchange = asyncio.create_task(_exchange(conn, PING, 1))
    await asyncio.sleep(0.1)
    exchange.cancel()
    with pytest.raises(asyncio.CancelledError):
        await exchange
    assert not conn.is_connected
