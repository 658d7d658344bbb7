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
import threading
from urllib.parse import urlsplit, urlunsplit

from ..passthrough.server import socket_path

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0
_CHUNK = 65536


class Relay:
    """A Unix socket whose every connection is carried to `host:port` (a daemon thread with its own loop)."""

    def __init__(self, host: str, port: int, name: str) -> None:
        self.host = host
        self.port = port
        self.path = socket_path(f"claudeq-{name}-{os.getpid()}.sock")
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


def host_allowed(host: str, port: int, allowed: list[str]) -> bool:
    """Whether `host:port` is one of `allowed`: `name` (any port), `name:port`, `*.suffix` (its subdomains)."""
    host = host.lower().strip("[]")
    for entry in allowed:
        name, _, wanted = entry.lower().rpartition(":") if entry.count(":") == 1 else (entry.lower(), "", "")
        if wanted and (not wanted.isdigit() or int(wanted) != port):
            continue
        if name == host or (name.startswith("*.") and host.endswith(name[1:])):
            return True
    return False


class HostProxy:
    """An HTTP proxy on a Unix socket that reaches only the hosts the operator named
    (`CLAUDEQ_POLICY__NETWORK_HOSTS`): `CONNECT host:port` for TLS, absolute-form requests for plain HTTP; anything
    else is a 403. Sandboxed shell jobs get it as their HTTP(S)_PROXY: a hole of exactly those hosts, for programs
    that use a proxy (curl, pip, git, npm); a raw socket still reaches nothing (docs/workers.md#security-defaults)."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = allowed
        self.path = socket_path(f"claudeq-hosts-proxy-{os.getpid()}.sock")
        self._ready = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="claudeq-hosts-proxy", daemon=True)

    def start(self) -> HostProxy:
        """Start serving; raises RuntimeError when it could not."""
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S) or self._failure is not None:
            raise RuntimeError(f"the network hosts' proxy did not start: {self._failure or 'timeout'}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.error("network hosts' proxy stopped: %s", self._failure)
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self.path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._handle, path=str(self.path))
        self.path.chmod(0o666)
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        method, _, rest = head.decode("latin-1").partition(" ")
        target = rest.partition(" ")[0]
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port = int(port_text) if port_text.isdigit() else 443
        else:
            parts = urlsplit(target)
            host, port = parts.hostname or "", parts.port or 80
            if parts.scheme != "http":
                host = ""
        if not host or not host_allowed(host, port, self.allowed):
            log.warning("network hosts' proxy refused %s %s", method, target[:200])
            writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            writer.close()
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            # The request line in origin-form, as a server expects it from a client (not a proxy).
            line, _, fields = head.partition(b"\r\n")
            parts = urlsplit(target)
            origin = urlunsplit(("", "", parts.path or "/", parts.query, ""))
            version = line.decode("latin-1").rpartition(" ")[2]
            up_writer.write(f"{method} {origin} {version}\r\n".encode("latin-1") + fields)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
