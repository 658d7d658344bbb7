"""The worker's loopback pass-through to the model service: every run's CLI talks to the API through it.

Why: the CLI does not hand response headers to the SDK, and the headers are where the API says how much is left
(`anthropic-ratelimit-*`) and when to come back (`retry-after`). Standing in the request path, one process-wide
server per worker reads them from every response, for every account kind, and hands them to the account state
(`AccountSignals.record_response`) on a recorder thread, so nothing in the stream waits for Redis.

It also keeps real tokens out of the runs: each run's CLI gets a stand-in credential of the same shape, valid only
here and only while the run lasts (`open_run` / `close_run`); the real token is read from its source (environment
variable or file) for each request and put on the upstream request only. A shell a job runs can read the stand-in,
never the account's token.

It forwards only the calls the CLI makes (`ALLOWED`, measured in docs/cli-behaviour.md#traffic-of-one-run): a stand-in
read from a run's environment must not buy anything else with the real token (minting API keys, batches, any call
no slot, cap or spend record sees). Anything else is answered here with a 403 and never leaves the worker; the
refusal is logged (method and redacted path, never a credential) and counted (`claudeq_passthrough_refused`).

What it forwards is unchanged: method, path, query, headers (but hop-by-hop ones and the credential), body; the
response's status, headers and body bytes exactly as they arrive (compressed or not, SSE included), each chunk
written as soon as it is read, nothing buffered. A client that goes away cancels the upstream request. An upstream
that cannot be reached is a 502 (the CLI treats it as a server error); one that breaks mid-stream breaks the
client's stream the same way.

It runs on a thread of its own with its own event loop: a busy engine loop never delays a stream, and a stream never
delays a heartbeat. If that loop dies, the runs using it fail as transient with the reason (`failure_for`), and the
next run starts a new one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ...config.account_pool import AccountConfig
from ..redaction import redact
from .limit_headers import LimitFacts, LimitHint, parse
from .prefixes import Breakpoint, breakpoints

log = logging.getLogger("claudeq.passthrough")

DEFAULT_UPSTREAM = "https://api.anthropic.com"
#: Stand-in prefixes: the same shape as the real credential of each kind.
STAND_IN_PREFIX: dict[str, str] = {"oauth": "sk-ant-oat01-", "api_key": "sk-ant-api03-"}
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)
_HOP_BY_HOP_BYTES = frozenset(h.encode() for h in _HOP_BY_HOP)
#: The first 20 bytes of the header names the pass-through reads (`anthropic-ratelimit-*`, `retry-after`).
_LIMIT_HEADER_PREFIXES = frozenset({b"anthropic-ratelimit-", b"retry-after"})
#: The only calls forwarded, as (method, path, query string): what the bundled CLI was measured to send with
#: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (docs/cli-behaviour.md#traffic-of-one-run says how to re-measure).
ALLOWED: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("POST", "/v1/messages", "beta=true"),  # every model turn (streaming, and the non-streaming re-send)
        ("POST", "/v1/messages/count_tokens", "beta=true"),  # e.g. the Read tool sizing a large file
    }
)
_ALLOWED_PATHS = frozenset(path for _, path, _ in ALLOWED)
_ALLOWED_TEXT = ", ".join(f"{m} {p}?{q}" if q else f"{m} {p}" for m, p, q in sorted(ALLOWED))
#: Label values of a refused request's method (anything else is `other`).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LOGGED_PATH = 120
_MAX_HEAD = 1 << 20
_MAX_BODY = 64 << 20
_START_TIMEOUT_S = 10.0
SETTLE_TIMEOUT_S = 2.0

#: Called on the recorder thread for each response that carries rate-limit facts (or succeeded): records them and
#: says what it did about a 429.
ResponseSink = Callable[[str, LimitFacts], LimitHint | None]
#: Called on the recorder thread for each Messages request answered 2xx: (account, the run's prefix key or None,
#: the prefixes it cached, when) -- AccountManager.record_prefixes (docs/architecture.md#cache-affinity).
PrefixSink = Callable[[str, str | None, list[Breakpoint], float], None]
#: Called on the pass-through's thread for each request it refuses: (method label, reason), both bounded
#: (`refusal`); WorkerMetrics.passthrough_refused counts them.
RefusalSink = Callable[[str, str], None]


@dataclass
class RunGrant:
    """One run's stand-in credential and what the pass-through learnt for that run."""

    run_id: str
    account: AccountConfig
    token: str  # the stand-in (never the real token)
    base_url: str  # ANTHROPIC_BASE_URL for the run's CLI
    upstream: str  # where its requests go
    generation: int  # the server that issued it
    hint: LimitHint | None = None  # what was done about the last 429 of this run
    pending: list[concurrent.futures.Future[None]] = field(default_factory=list)
    #: A warm CLI between jobs (docs/architecture.md#warm-clis): its stand-in stays registered, but a request with
    #: it is refused and counted (an idle CLI has no business calling the API, and holds no account slot).
    parked: bool = False
    idle_requests: int = 0
    #: The job's prefix key (docs/architecture.md#cache-affinity): what the prefixes its requests cache are filed under.
    prefix_key: str | None = None


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    close: bool


def refusal(method: str, target: str) -> str | None:
    """Why a request for `method target` is not forwarded (`path`: no call the CLI makes goes there, `method`: not
    with this method, `query`: not with this query string), or None when it is one of the `ALLOWED` calls."""
    path, _, query = target.partition("?")
    if (method, path, query) in ALLOWED:
        return None
    if path not in _ALLOWED_PATHS:
        return "path"
    if not any(m == method and p == path for m, p, _ in ALLOWED):
        return "method"
    return "query"


def method_label(method: str) -> str:
    """A bounded label value for a request's method."""
    return method if method in _METHODS else "other"


def stand_in(kind: str) -> str:
    """A fresh stand-in credential shaped like a real one of `kind`."""
    return STAND_IN_PREFIX.get(kind, STAND_IN_PREFIX["api_key"]) + secrets.token_urlsafe(70)[:93] + "AA"


def default_upstream(account: AccountConfig) -> str:
    """Where an account's requests go: its base_url, else the worker's ANTHROPIC_BASE_URL, else the API."""
    return (account.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_UPSTREAM).rstrip("/")


#: A Unix socket's path holds at most 107 bytes (the kernel's sun_path, less its NUL).
_MAX_SOCKET_PATH = 107
_SHORT_DIR_PREFIX = "claudeq-pt-"


def socket_path(name: str) -> Path:
    """Where the pass-through's Unix socket goes: the temp directory, or, when its path is too long for a socket (a
    deep TMPDIR), a private directory of its own under /tmp that every uid may enter (a run's uid reaches the socket
    from its sandbox: docs/architecture.md#the-run-sandbox)."""
    path = Path(tempfile.gettempdir()) / name
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    short = Path(tempfile.mkdtemp(prefix=_SHORT_DIR_PREFIX, dir="/tmp"))
    short.chmod(0o711)
    return short / name


class PassThrough:
    """One loopback server per worker process (start it after fork); thread-safe to open and close runs."""

    def __init__(
        self,
        sink: ResponseSink | None = None,
        host: str = "127.0.0.1",
        refused: RefusalSink | None = None,
        prefixes: PrefixSink | None = None,
    ) -> None:
        self.sink = sink
        self.refused = refused
        self.prefixes = prefixes
        self.host = host
        self.port = 0
        self.generation = 0
        self.failure: str | None = None  # why the last server stopped, when it was not asked to
        self._grants: dict[str, RunGrant] = {}  # stand-in -> grant
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        #: The same server on a Unix socket: sandboxed runs reach it through it (their network has no other way out).
        self.unix_path: Path | None = None
        self._unix_server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._stopping = False
        self._recorder = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cq-limits")

    # ---- lifecycle -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The URL runs' CLIs talk to."""
        return f"http://{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        """Whether the server thread is serving."""
        return self._thread is not None and self._thread.is_alive() and self._server is not None

    def start(self) -> None:
        """Start serving on a free loopback port (a new server if the last one stopped); idempotent."""
        with self._lock:
            if self.alive:
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
            self.port = sock.getsockname()[1]
            self.generation += 1
            self.unix_path = socket_path(f"claudeq-passthrough-{os.getpid()}-{self.generation}.sock")
            self._stopping = False
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(sock, ready, self.generation), name="claudeq-passthrough", daemon=True
            )
            self._thread.start()
        if not ready.wait(_START_TIMEOUT_S) or self._server is None:
            raise RuntimeError(f"the model-service pass-through did not start: {self.failure or 'timeout'}")
        # httpx logs every request at INFO: one line per model call is noise in a worker's log.
        logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger("httpx").level))
        log.info("pass-through serving on %s", self.base_url)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving (streams still open are cut) and wait for the thread."""
        self._stopping = True
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._shutdown)
            thread.join(timeout_s)
        self._thread = None

    def close(self) -> None:
        """Stop serving and stop the recorder thread (worker exit)."""
        self.stop()
        self._recorder.shutdown(wait=True, cancel_futures=False)

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._unix_server is not None:
            self._unix_server.close()
        for task in asyncio.all_tasks():
            task.cancel()

    def _run(self, sock: socket.socket, ready: threading.Event, generation: int) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(sock, ready))
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # a crash: say so, loudly, to the runs that used it
            self.failure = f"{type(exc).__name__}: {exc}"
            log.error("pass-through (generation %d) crashed: %s", generation, self.failure, exc_info=True)
        finally:
            if not self._stopping and self.failure is None:
                self.failure = "the pass-through stopped"
            self._server = self._unix_server = None
            if self.unix_path is not None:
                self.unix_path.unlink(missing_ok=True)
                if self.unix_path.parent.name.startswith(_SHORT_DIR_PREFIX):
                    with contextlib.suppress(OSError):
                        self.unix_path.parent.rmdir()
            ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        # read=None: a long reply may stream for many minutes; the CLI's own timeouts and the worker's watchdogs
        # decide when a request has taken too long, and cancel it by closing the connection.
        timeout = httpx.Timeout(connect=30.0, read=None, write=60.0, pool=None)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False) as client:
            self._client = client
            server = await asyncio.start_server(self._connection, sock=sock, limit=_MAX_HEAD)
            if self.unix_path is not None:
                self.unix_path.unlink(missing_ok=True)
                self._unix_server = await asyncio.start_unix_server(
                    self._connection, path=str(self.unix_path), limit=_MAX_HEAD
                )
                # Any uid may connect, as to the loopback port: a run's uid needs to; its stand-in is the key.
                self.unix_path.chmod(0o666)
            self._server = server
            self.failure = None
            ready.set()
            async with server:
                await server.serve_forever()

    # ---- runs ------------------------------------------------------------------------------------------------

    def open_run(self, run_id: str, account: AccountConfig) -> RunGrant:
        """A stand-in credential for one run on `account`, valid until `close_run` (starts the server if needed)."""
        if not self.alive:
            self.start()
        grant = RunGrant(
            run_id=run_id,
            account=account,
            token=stand_in(account.kind),
            base_url=self.base_url,
            upstream=default_upstream(account),
            generation=self.generation,
        )
        with self._lock:
            self._grants[grant.token] = grant
        return grant

    def close_run(self, grant: RunGrant) -> None:
        """Revoke the run's stand-in: any later request with it is refused."""
        with self._lock:
            self._grants.pop(grant.token, None)

    def park(self, grant: RunGrant) -> None:
        """A warm CLI goes idle: refuse its requests until `unpark`."""
        with self._lock:
            grant.parked = True

    def unpark(self, grant: RunGrant) -> None:
        """A warm CLI takes its next job: its requests go through again, and what the pass-through learns
        (a 429's cooldown, records to wait for) starts afresh for that job."""
        with self._lock:
            grant.hint = None
            grant.pending = []
            grant.parked = False

    def valid(self, grant: RunGrant) -> bool:
        """Whether the grant's stand-in is still honoured by a serving pass-through."""
        with self._lock:
            registered = self._grants.get(grant.token) is grant
        return registered and self.failure_for(grant) is None

    async def settle(self, grant: RunGrant, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until what this run's responses said is recorded (so the next acquire sees it)."""
        pending = [f for f in grant.pending if not f.done()]
        if pending:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending], timeout=timeout_s)

    def failure_for(self, grant: RunGrant) -> str | None:
        """Why the server that served this run is gone, or None while it still serves."""
        if self.alive and self.generation == grant.generation:
            return None
        return self.failure or "the pass-through stopped"

    @property
    def runs(self) -> int:
        """Stand-ins currently valid."""
        return len(self._grants)

    def _grant_for(self, headers: list[tuple[str, str]]) -> RunGrant | None:
        for name, value in headers:
            low = name.lower()
            if low == "x-api-key":
                credential = value.strip()
            elif low == "authorization" and value[:7].lower() == "bearer ":
                credential = value[7:].strip()
            else:
                continue
            grant = self._grants.get(credential)
            if grant is not None:
                return grant
        return None

    def _refuse(self, request: _Request, reason: str, grant: RunGrant | None) -> None:
        """Log and count a request outside `ALLOWED` (the path redacted and cut short, the query left out)."""
        with self._lock:
            stand_ins = list(self._grants)
        path, _, query = request.target.partition("?")
        shown = redact(path[:_LOGGED_PATH], stand_ins).encode("unicode_escape").decode("ascii")
        log.warning(
            "refused %s %s%s (%s not allowed: not a call the CLI makes) from %s",
            method_label(request.method),
            shown,
            f" with a query of {len(query)} bytes" if query else "",
            reason,
            f"run {grant.run_id} on account {grant.account.name}" if grant is not None else "no live stand-in",
        )
        if self.refused is not None:
            try:
                self.refused(method_label(request.method), reason)
            except Exception:
                log.warning("could not count a refused request", exc_info=True)

    def _record(self, grant: RunGrant, raw: list[tuple[bytes, bytes]], status: int, seen_at: float) -> None:
        if self.sink is None:
            return
        try:
            hint = self.sink(grant.account.name, parse(_latin1(raw), status, seen_at))
        except Exception:
            log.warning("could not record rate-limit facts for account %s", grant.account.name, exc_info=True)
            return
        if hint is not None:
            grant.hint = hint

    def _record_prefixes(self, grant: RunGrant, body: bytes, seen_at: float) -> None:
        if self.prefixes is None:
            return
        try:
            found = breakpoints(body)
            if found:
                self.prefixes(grant.account.name, grant.prefix_key, found, seen_at)
        except Exception:
            log.warning("could not record the prompt prefixes sent on account %s", grant.account.name, exc_info=True)

    # ---- HTTP ------------------------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carry = b""
        try:
            while True:
                try:
                    head = carry + await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await _local_error(writer, 431, "invalid_request_error", "request head too large", close=True)
                    return
                carry = b""
                request = _parse_head(head)
                if request is None:
                    await _local_error(writer, 400, "invalid_request_error", "malformed request", close=True)
                    return
                body = await _read_body(reader, request.headers)
                if body is None:
                    await _local_error(writer, 400, "invalid_request_error", "malformed or oversized body", close=True)
                    return
                keep, carry = await self._exchange(request, body, reader, writer)
                if not keep or request.close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception:
            log.warning("pass-through connection failed", exc_info=True)
        finally:
            writer.close()

    async def _exchange(
        self, request: _Request, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[bool, bytes]:
        """Forward one request; (keep the connection, bytes of a next request read while watching for EOF)."""
        grant = self._grant_for(request.headers)
        reason = refusal(request.method, request.target)
        if reason is not None:
            # Before the credential: a call the CLI never makes is refused whoever asks, and never sent upstream.
            self._refuse(request, reason, grant)
            await _local_error(
                writer,
                403,
                "permission_error",
                f"claudeq pass-through: refused ({reason} not allowed): only the Messages API calls the Claude CLI"
                f" makes are forwarded ({_ALLOWED_TEXT})",
                close=request.close,
            )
            return True, b""
        if grant is None:
            await _local_error(
                writer,
                401,
                "authentication_error",
                "claudeq pass-through: unknown or expired stand-in credential",
                close=request.close,
            )
            return True, b""
        if grant.parked:
            grant.idle_requests += 1
            log.warning("run %s: a request while its CLI was idle between jobs; refused", grant.run_id)
            await _local_error(
                writer,
                401,
                "authentication_error",
                "claudeq pass-through: this CLI is idle between jobs",
                close=request.close,
            )
            return True, b""
        forward = asyncio.create_task(self._forward(grant, request, body, writer))
        watch = asyncio.create_task(reader.read(1))
        try:
            done, _ = await asyncio.wait({forward, watch}, return_when=asyncio.FIRST_COMPLETED)
            if forward not in done:
                data = watch.result() if not watch.cancelled() and watch.exception() is None else b""
                if not data:
                    # The client went away (CLI stopped, killed, or gave up): cancel the upstream request.
                    forward.cancel()
                    with contextlib.suppress(BaseException):
                        await forward
                    return False, b""
                return await forward, data  # a pipelined request: answer this one first
            watch.cancel()
            with contextlib.suppress(BaseException):
                await watch
            return forward.result(), b""
        finally:
            for task in (forward, watch):
                if not task.done():
                    task.cancel()

    async def _forward(self, grant: RunGrant, request: _Request, body: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            token = grant.account.read_token()
        except Exception as exc:
            await _local_error(writer, 502, "api_error", f"claudeq pass-through: {exc}", close=request.close)
            return True
        headers: list[tuple[str, str]] = []
        sent: set[str] = set()
        for name, value in request.headers:
            low = name.lower()
            if low in _HOP_BY_HOP or low == "content-length":
                continue
            if low == "authorization":
                value = f"Bearer {token}"
            elif low == "x-api-key":
                value = token
            headers.append((name, value))
            sent.add(low)
        del token
        client = self._client
        assert client is not None
        upstream = client.build_request(request.method, grant.upstream + request.target, headers=headers, content=body)
        headers.clear()
        for default in ("accept", "accept-encoding", "user-agent"):
            if default not in sent and default in upstream.headers:
                del upstream.headers[default]
        try:
            response = await client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            del upstream
            await _local_error(
                writer, 502, "api_error", f"claudeq pass-through: upstream {type(exc).__name__}", close=request.close
            )
            return True
        del upstream  # it carries the real token: gone as soon as it is sent
        try:
            status = response.status_code
            limits = [(k, v) for k, v in response.headers.raw if k[:20].lower() in _LIMIT_HEADER_PREFIXES]
            if limits or status == 429 or 200 <= status < 300:
                # Parsed and recorded on the recorder thread: nothing here waits for it.
                grant.pending.append(self._recorder.submit(self._record, grant, limits, status, time.time()))
            if 200 <= status < 300 and self.prefixes is not None and request.target.startswith("/v1/messages?"):
                # The API cached the prefixes this request asked for: file them under the account (digests only).
                grant.pending.append(self._recorder.submit(self._record_prefixes, grant, body, time.time()))
            no_body = request.method == "HEAD" or response.status_code in (204, 304) or response.status_code < 200
            sized = any(k.lower() == b"content-length" for k, _ in response.headers.raw)
            chunked = not no_body and not sized
            lines = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}".encode()]
            lines += [k + b": " + v for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP_BYTES]
            if chunked:
                lines.append(b"transfer-encoding: chunked")
            if request.close:
                lines.append(b"connection: close")
            writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
            if not no_body:
                async for chunk in response.aiter_raw():
                    if chunk:
                        writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                        await writer.drain()
                if chunked:
                    writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        except httpx.HTTPError:
            # Upstream broke mid-stream: break the client's stream too, as a direct connection would have.
            writer.transport.abort()
            return False
        finally:
            await response.aclose()


def _latin1(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


def _parse_head(head: bytes) -> _Request | None:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return None
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers.append((name, value.strip()))
    connection = ",".join(v.lower() for n, v in headers if n.lower() == "connection")
    close = "close" in connection or (parts[2] == "HTTP/1.0" and "keep-alive" not in connection)
    return _Request(parts[0], parts[1], headers, close)


async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]]) -> bytes | None:
    lengths = [v for n, v in headers if n.lower() == "content-length"]
    encodings = ",".join(v.lower() for n, v in headers if n.lower() == "transfer-encoding")
    if "chunked" in encodings:
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                return None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > _MAX_BODY:
                return None
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if not lengths:
        return b""
    try:
        length = int(lengths[0])
    except ValueError:
        return None
    if length < 0 or length > _MAX_BODY or len(set(lengths)) > 1:
        return None
    return await reader.readexactly(length)


async def _local_error(writer: asyncio.StreamWriter, status: int, kind: str, message: str, close: bool) -> None:
    """An answer of the pass-through itself, in the API's error shape."""
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    reason = {
        400: "Bad Request",
        401: "Unauthorized",
        403: "Forbidden",
        431: "Request Header Fields Too Large",
        502: "Bad Gateway",
    }
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-claudeq-passthrough: local\r\n"
    )
    if close:
        head += "connection: close\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
