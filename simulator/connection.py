"""The ASGI side of one request: reading the body, sending the answer, noticing a client that went away."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .errors import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY_BYTES = 32 * 1024 * 1024


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class Connection:
    """Sends the response and notices a client that went away while the simulator sleeps."""

    def __init__(self, receive: Receive, send: Send):
        self._receive = receive
        self._send = send
        self.gone = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self.started = False

    async def read_body(self) -> bytes:
        """The whole request body."""
        chunks = []
        size = 0
        while True:
            msg = await self._receive()
            if msg["type"] == "http.disconnect":
                raise ClientGone
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"Request exceeds the maximum size of {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.gone.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep; False (early) if the client disconnected meanwhile."""
        if seconds <= 0:
            return not self.gone.is_set()
        if self._watcher is None:
            # Only requests that wait need the watcher: the fast path stays one task per request.
            self._watcher = asyncio.create_task(self._watch())
        try:
            async with asyncio.timeout(seconds):
                await self.gone.wait()
        except TimeoutError:
            return True
        return False

    async def start(self, status: int, headers: dict[str, str]) -> None:
        """Send the status line and headers."""
        self.started = True
        raw = [(k.encode(), v.encode()) for k, v in headers.items()]
        await self._send({"type": "http.response.start", "status": status, "headers": raw})

    async def body(self, data: bytes, more: bool) -> None:
        """Send part of the body; `more=False` completes the response."""
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    def close(self) -> None:
        """Stop watching for a disconnect."""
        if self._watcher is not None:
            self._watcher.cancel()
