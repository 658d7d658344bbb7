"""A TCP proxy that can be frozen: connections stay open but no byte moves either way until it is thawed (a Redis
that stopped answering without closing anything). Runs its own asyncio loop on a thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class FreezableProxy:
    """Forward 127.0.0.1:<port> to `upstream_host:upstream_port`; `freeze()` / `thaw()` from any thread."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True, name="freezable-proxy")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("proxy did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._flowing = asyncio.Event()
            self._flowing.set()
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(start())
        ready.set()
        self._loop.run_forever()
        # Let the connection handlers see their writers closed and end before the loop closes.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                await self._flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()  # read while flowing, frozen before it could be passed on: hold it
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def _call(self, fn: Any) -> None:
        self._loop.call_soon_threadsafe(fn)

    def freeze(self) -> None:
        """Stop moving bytes (connections stay open)."""
        assert self._flowing is not None
        self._call(self._flowing.clear)

    def thaw(self) -> None:
        """Move bytes again."""
        assert self._flowing is not None
        self._call(self._flowing.set)

    def url(self, db: int = 0) -> str:
        """A redis:// URL through the proxy."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def close(self) -> None:
        """Stop serving and end the loop thread."""

        async def stop() -> None:
            assert self._flowing is not None
            self._flowing.set()
            if self._server is not None:
                self._server.close()
            for writer in self._writers:
                writer.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._call(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
