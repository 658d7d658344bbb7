"""A Unix socket carried to one TCP address: the route a sandboxed run has to the trace collector.

A sandboxed run's network namespace has no way out (docs/architecture.md#the-run-sandbox); what it may reach is bound
into it as a Unix socket. The pass-through listens on one itself; the trace collector does not, so the worker opens
this relay to it, once per process, on first use: every byte each way, nothing read, nothing kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0
_CHUNK = 65536


class Relay:
    """A Unix socket whose every connection is carried to `host:port` (a daemon thread with its own loop)."""

    def __init__(self, host: str, port: int, name: str) -> None:
        self.host = host
        self.port = port
        self.path = Path(tempfile.gettempdir()) / f"claudeq-{name}-{os.getpid()}.sock"
        self._ready = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"claudeq-relay-{name}", daemon=True)

    def start(self) -> Relay:
        """Start serving; raises RuntimeError when it could not."""
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S) or self._failure is not None:
            raise RuntimeError(f"the relay to {self.host}:{self.port} did not start: {self._failure or 'timeout'}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # never silent: the runs that need it say so (their spans stop)
            self._failure = f"{type(exc).__name__}: {exc}"
            log.error("relay to %s:%s stopped: %s", self.host, self.port, self._failure)
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self.path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._carry, path=str(self.path))
        self.path.chmod(0o666)  # a run's uid connects to it, as any uid can to the collector's port
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


#: The exporter variables naming where OTLP goes (the signal-specific one wins, as in the OTel SDKs).
ENDPOINT_VARS: tuple[str, ...] = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def collector_address(env: dict[str, str]) -> tuple[str, int] | None:
    """(host, port) of the OTLP/HTTP collector a run's CLI exports to, when it is plain `http://`; else None."""
    for name in ENDPOINT_VARS:
        value = env.get(name)
        if value:
            parts = urlsplit(value)
            if parts.scheme != "http" or not parts.hostname:
                return None
            return parts.hostname, parts.port or 4318
    return None


def through_loopback(env: dict[str, str], port: int) -> dict[str, str]:
    """The exporter variables of `env` pointed at `127.0.0.1:port` (the sandbox's end of the relay), paths kept."""
    out: dict[str, str] = {}
    for name in ENDPOINT_VARS:
        value = env.get(name)
        if value:
            parts = urlsplit(value)
            out[name] = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
    return out
