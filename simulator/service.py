"""The simulator's state and its `POST /v1/messages` handler (a raw ASGI app, for control over the stream:
stalls, dropped connections and noticing a client that went away)."""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .accounts import CLAIMS, UNIFIED, Account, AccountRegistry
from .config import SimConfig, coerce_config, merge_config
from .connection import ClientGone, Connection, Message, Receive, Scope, Send
from .directives import DirectiveError, Steering, approved_call, parse_directives
from .errors import ApiError, new_request_id
from .protocol import (
    MessagesRequest,
    Turn,
    current_turn,
    last_user_text,
    message_text,
    parse_request,
    prompt_segments,
)
from .replies import Reply, plan_reply, title_reply
from .sse import block_events, message_body, message_end, message_start, new_message_id
from .stats import AccountStats, Stats
from .usage import Usage, estimate_tokens

__all__ = ["Message", "Simulator"]

log = logging.getLogger("simulator")

LOG_TEXT_LIMIT = 4_000  # characters of each message's text kept in the request log (its head and its tail)
LOG_MESSAGES = 30  # the request log keeps the first message and this many last ones
SEEN_LIMIT = 10_000  # message keys whose directive counters are kept (least recently used dropped)
INJECTED_429_RESET_S = 3600  # reset of an injected 429 on an account without windows


def _message_key(directive_text: str) -> str:
    return hashlib.sha256(directive_text.encode()).hexdigest()


def _log_text(text: str) -> str:
    if len(text) <= LOG_TEXT_LIMIT:
        return text
    half = LOG_TEXT_LIMIT // 2
    return f"{text[:half]} […{len(text) - 2 * half} characters not logged…] {text[-half:]}"


def log_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the request log keeps them: bounded in number and in text per message."""
    logged = [{"role": m.get("role"), "text": _log_text(message_text(m))} for m in messages]
    if len(logged) <= LOG_MESSAGES + 1:
        return logged
    skipped = len(logged) - LOG_MESSAGES - 1
    return [logged[0], {"role": None, "text": f"[…{skipped} messages not logged…]"}, *logged[-LOG_MESSAGES:]]


@dataclass(frozen=True)
class _Exchange:
    """One request being answered: its connection, the parsed request, the account it came in on, its log entry."""

    conn: Connection
    req: MessagesRequest
    account: Account
    entry: dict[str, Any]
    request_id: str


@dataclass(frozen=True)
class _Pace:
    """How an answer is paced: a stall before the first byte, time to first token and tokens per second (s), and
    whether its connection drops halfway."""

    stall: float
    ttft: float
    tps: float
    drop: bool


class Simulator:
    """One simulated model service: configuration, accounts, counters and the request handler."""

    def __init__(self, config: SimConfig | dict[str, Any] | None = None):
        self.config = coerce_config(config)
        self._fresh_state()

    def _fresh_state(self) -> None:
        self.registry = AccountRegistry(self.config)
        self.stats = Stats(self.config.request_log_size)
        self.rng = random.Random(self.config.seed)
        # Requests seen per message key, for the `times=` / `after=` of directives.
        self.seen: OrderedDict[str, int] = OrderedDict()

    def reset(self) -> None:
        """Forget all counters, window usage, caches and the log; reseed the RNG. The config stays."""
        self._fresh_state()

    def reconfigure(self, changes: dict[str, Any]) -> SimConfig:
        """Apply a run-time change (see config.merge_config); window usage of kept windows survives."""
        new = merge_config(self.config, changes)
        self.registry = AccountRegistry(new, previous=self.registry)
        if new.request_log_size != self.config.request_log_size:
            self.stats.log = type(self.stats.log)(self.stats.log, maxlen=new.request_log_size)
            self.stats.wire = type(self.stats.wire)(self.stats.wire, maxlen=new.request_log_size)
        if "seed" in changes:
            self.rng = random.Random(new.seed)
        self.config = new
        return new

    def snapshot(self) -> dict[str, Any]:
        """The body of GET /_sim/stats."""
        now = time.time()
        windows = {name: acct.window_stats(now) for name, acct in self.registry.accounts.items()}
        return self.stats.snapshot(windows)

    def latency(self, account: Account, model: str) -> tuple[float, float]:
        """(ttft_s, tokens_per_s): account setting, else the model's, else the default."""
        default = self.config.latency
        per_model = default.models.get(model)
        ttft = default.ttft_s if per_model is None or per_model.ttft_s is None else per_model.ttft_s
        tps = default.tokens_per_s if per_model is None or per_model.tokens_per_s is None else per_model.tokens_per_s
        if account.ttft_s is not None:
            ttft = account.ttft_s
        if account.tokens_per_s is not None:
            tps = account.tokens_per_s
        return ttft, tps

    # --- the handler -------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point for POST /v1/messages. Never raises: any failure becomes an error answer."""
        conn = Connection(receive, send)
        request_id = new_request_id()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        entry = self.stats.new_entry(
            account=None,
            session_id=headers.get("x-claude-code-session-id"),
            kind="main",
            model=None,
            stream=None,
            tool_names=[],
            messages=[],
            system_text_len=0,
            status=None,
            outcome=None,
            directives=[],
        )
        account: Account | None = None
        # A reset while this request runs replaces self.stats: it must end where it began.
        stats = self.stats
        try:
            body = await conn.read_body()
            account = self._authenticate(headers)
            entry["account"] = account.name
            stats.begin(account.name)
            await self._serve(account, body, entry, conn, request_id)
        except ClientGone:
            entry["outcome"] = "disconnected"
        except ApiError as err:
            await self._send_error(conn, err, request_id, entry)
        except RecursionError:
            # Only a deeply nested request body gets here (json parses deeper than the code walking it can go).
            self.stats.bad_requests += 1
            entry["outcome"] = "bad_request"
            await self._send_error(conn, ApiError(400, "The request body is nested too deeply"), request_id, entry)
        except Exception:
            log.exception("simulator: unexpected failure answering a request")
            await self._send_error(conn, ApiError(500, "Internal server error (simulator bug)"), request_id, entry)
        finally:
            conn.close()
            entry["ended"] = time.time()
            if account is not None:
                stats.end(account.name)

    def record_wire(self, scope: Scope) -> None:
        """Log one HTTP request as it arrived (any path outside /_sim/): method, path, query string and headers,
        a credential header's value replaced by the account it names (`<account NAME>`) or `<unknown>`."""
        headers: list[list[str]] = []
        account: str | None = None
        for raw_name, raw_value in scope.get("headers", []):
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            if name in ("authorization", "x-api-key"):
                token = value[7:].strip() if name == "authorization" and value[:7].lower() == "bearer " else value
                known = self.registry.name_of(token.strip())
                account = account or known
                value = f"<account {known}>" if known is not None else "<unknown>"
            headers.append([name, value])
        self.stats.wire_entry(
            method=scope.get("method", ""),
            path=scope.get("path", ""),
            query=scope.get("query_string", b"").decode("latin-1"),
            account=account,
            headers=headers,
        )

    def _authenticate(self, headers: dict[str, str]) -> Account:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and auth[7:].strip():
            token, kind = auth[7:].strip(), "oauth"
        elif headers.get("x-api-key"):
            token, kind = headers["x-api-key"], "api_key"
        else:
            self.stats.unknown_token += 1
            raise ApiError(401, "x-api-key header is required")
        account = self.registry.lookup(token, "oauth" if kind == "oauth" else "api_key")
        if account is None:
            self.stats.unknown_token += 1
            raise ApiError(401, "Invalid bearer token" if kind == "oauth" else "invalid x-api-key")
        return account

    async def _send_error(self, conn: Connection, err: ApiError, request_id: str, entry: dict[str, Any]) -> None:
        entry["status"] = err.status
        entry["error"] = err.error_type
        entry["outcome"] = entry["outcome"] or "error"
        if conn.started:
            return  # mid-stream: nothing sensible left to send
        body = err.body(request_id)
        headers = {
            **err.headers,
            "content-type": "application/json",
            "content-length": str(len(body)),
            "request-id": request_id,
        }
        if err.status >= 500:
            # The real service asks for retries of server errors this way.
            headers["x-should-retry"] = "true"
        await conn.start(err.status, headers)
        await conn.body(body, more=False)

    async def _serve(
        self, account: Account, body: bytes, entry: dict[str, Any], conn: Connection, request_id: str
    ) -> None:
        now = time.time()
        stats = self.stats.account(account.name)
        req = self._parse(body, stats, entry)
        exchange = _Exchange(conn, req, account, entry, request_id)
        if req.is_title:
            # The title side request carries the prompt too, directives included: it never fails.
            entry["kind"] = "title"
            stats.title_requests += 1
            if account.auth_fail:
                raise ApiError(401, "Invalid bearer token")
            usage = Usage(input_tokens=sum(estimate_tokens(len(s.data)) for s in prompt_segments(req)))
            await self._answer(exchange, title_reply(req), usage, {}, title=True)
            return
        stats.requests += 1
        session_id = entry["session_id"]
        if session_id:
            self.stats.session(session_id, account.name).requests += 1
        turn = current_turn(req.messages)
        steering, seen = self._steering(req, turn, entry)
        if account.auth_fail:
            stats.auth_failed += 1
            raise ApiError(401, "Invalid bearer token" if account.kind == "oauth" else "invalid x-api-key")
        if steering.delay and steering.delay[1].active(seen) and not await conn.sleep(steering.delay[0]):
            entry["outcome"] = "disconnected"
            return
        # Three draws per request whatever is configured, so a seed replays the same faults.
        r_error, r_stall, r_drop = self.rng.random(), self.rng.random(), self.rng.random()
        status = self._injected_status(steering, seen, r_error)
        if status is not None:
            stats.errors_injected += 1
            raise self._injected_error(status, account, now, steering)
        entry["utilization_before"] = account.utilization_before(now, req.model)
        blocking = account.admit(now, req.model)
        if blocking is not None:
            stats.rejected += 1
            entry["outcome"] = "rejected"
            raise account.rejection(blocking, now)
        stall, drop = self._stall_and_drop(stats, steering, seen, r_stall, r_drop)
        reply = plan_reply(req, turn, steering)
        usage = account.cache.measure(
            prompt_segments(req), now, self.config.cache_ttl_s, min_tokens=self.config.cache_min_tokens
        )
        if steering.tokens_in is not None:
            usage = Usage(input_tokens=steering.tokens_in)
        if stall:
            entry["stall_s"] = stall
        rate_headers = account.allowed_headers(now)
        await self._answer(exchange, reply, usage, rate_headers, stall, drop)

    def _parse(self, body: bytes, stats: AccountStats, entry: dict[str, Any]) -> MessagesRequest:
        """The request, its facts noted in the log `entry`; a malformed one is counted and raised (ApiError)."""
        try:
            req = parse_request(body)
        except ApiError:
            stats.requests += 1
            self.stats.bad_requests += 1
            entry["outcome"] = "bad_request"
            raise
        entry.update(
            model=req.model,
            stream=req.stream,
            tool_names=req.tool_names,
            messages=log_messages(req.messages),
            system_text_len=len(req.system_text),
        )
        return req

    def _steering(self, req: MessagesRequest, turn: Turn, entry: dict[str, Any]) -> tuple[Steering, int]:
        """The turn's directives, and how many times this same message was seen before (for `once`-style ones)."""
        try:
            steering = parse_directives(turn.directive_text)
        except DirectiveError as e:
            raise ApiError(400, f"simulator directive: {e}") from None
        if steering.tokens_out is not None and steering.tokens_out > req.max_tokens:
            raise ApiError(
                400, f"simulator directive: tokens out={steering.tokens_out} exceeds max_tokens ({req.max_tokens})"
            )
        steering.again = approved_call(last_user_text(req.messages))
        entry["directives"] = steering.raw
        seen = 0
        if steering.raw:
            key = _message_key(turn.directive_text)
            seen = self.seen.pop(key, 0)
            self.seen[key] = seen + 1
            if len(self.seen) > SEEN_LIMIT:
                self.seen.popitem(last=False)
        return steering, seen

    def _injected_status(self, steering: Steering, seen: int, r_error: float) -> int | None:
        """The error status this request gets (a directive's, or a configured fault's), or None."""
        faults = self.config.faults
        if steering.error and steering.error[1].active(seen):
            return steering.error[0]
        if r_error < faults.p_529:
            return 529
        if r_error < faults.p_529 + faults.p_500:
            return 500
        return None

    def _stall_and_drop(
        self, stats: AccountStats, steering: Steering, seen: int, r_stall: float, r_drop: float
    ) -> tuple[float, bool]:
        """How long the answer stalls before its first byte (s) and whether its connection drops, counted."""
        faults = self.config.faults
        stall = 0.0
        if steering.stall and steering.stall[1].active(seen):
            stall = steering.stall[0]
        elif r_stall < faults.p_stall:
            stall = faults.stall_s
        drop = bool(steering.drop and steering.drop.active(seen)) or r_drop < faults.p_drop
        if stall:
            stats.stalls_injected += 1
        if drop:
            stats.drops_injected += 1
            stats.errors_injected += 1
        return stall, drop

    def _injected_error(self, status: int, account: Account, now: float, steering: Steering) -> ApiError:
        if status == 401:
            return ApiError(401, "Invalid bearer token" if account.kind == "oauth" else "invalid x-api-key")
        if status != 429:
            return ApiError(status)
        if steering.no_hint or steering.retry_after is not None:
            # A plain 429 (no unified or per-family headers): with exactly the retry-after asked for, or none.
            headers = {} if steering.no_hint else {"retry-after": f"{steering.retry_after:g}"}
            return ApiError(429, "Number of requests has exceeded your rate limit.", headers)
        window = max(account.windows, key=lambda w: w.utilization(), default=None)
        if window is not None:
            window.roll(now)
            return account.rejection(window, now)
        reset = int(now) + INJECTED_429_RESET_S
        if account.kind == "api_key":
            return ApiError(429, "Number of requests has exceeded your rate limit.", {"retry-after": "60"})
        return ApiError(
            429,
            None,
            {
                f"{UNIFIED}-status": "rejected",
                f"{UNIFIED}-reset": str(reset),
                f"{UNIFIED}-representative-claim": CLAIMS["5h"],
            },
        )

    async def _answer(
        self,
        exchange: _Exchange,
        reply: Reply,
        usage: Usage,
        rate_headers: dict[str, str],
        stall: float = 0.0,
        drop: bool = False,
        title: bool = False,
    ) -> None:
        """Send `reply` (whole or streamed as the request asks) at the account's pace, billing what was sent."""
        req, account, entry = exchange.req, exchange.account, exchange.entry
        ttft, tps = (0.0, 0.0) if title else self.latency(account, req.model)
        session_id = None if title else entry["session_id"]
        entry["status"] = 200
        entry["usage"] = {
            **usage.as_stats(),
            "output": reply.output_tokens,
            "cache_creation_1h": usage.cache_creation_1h_tokens,
        }

        def bill(part: Usage) -> None:
            self.stats.bill(account.name, session_id, part, title)
            if not title:
                account.add_tokens(part.total(), req.model)

        headers = {**rate_headers, "request-id": exchange.request_id}
        pace = _Pace(stall, ttft, tps, drop)
        if req.stream:
            await self._answer_stream(exchange, reply, usage, headers, pace, bill)
        else:
            await self._answer_whole(exchange, reply, usage, headers, pace, bill)

    async def _answer_whole(
        self,
        exchange: _Exchange,
        reply: Reply,
        usage: Usage,
        headers: dict[str, str],
        pace: _Pace,
        bill: Callable[[Usage], None],
    ) -> None:
        """The reply as one JSON body, after the time the whole of it would take."""
        conn, req, entry = exchange.conn, exchange.req, exchange.entry
        wait = pace.stall + pace.ttft + (reply.output_tokens / pace.tps if pace.tps else 0.0)
        if not await conn.sleep(wait):
            entry["outcome"] = "disconnected"
            return
        body = message_body(new_message_id(), req.model, reply, usage)
        await conn.start(200, {**headers, "content-type": "application/json", "content-length": str(len(body))})
        if pace.drop:
            # The usage sits at the end of the body, which the client never gets: nothing is billed.
            await conn.body(body[: len(body) // 2], more=True)
            entry["outcome"] = "dropped"
            return
        full = Usage(
            usage.input_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            reply.output_tokens,
        )
        bill(full)
        await conn.body(body, more=False)
        entry["outcome"] = "ok"

    async def _answer_stream(
        self,
        exchange: _Exchange,
        reply: Reply,
        usage: Usage,
        headers: dict[str, str],
        pace: _Pace,
        bill: Callable[[Usage], None],
    ) -> None:
        """The reply as server-sent events, each block's text at the account's tokens per second."""
        conn, req, entry = exchange.conn, exchange.req, exchange.entry
        await conn.start(
            200, {**headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        )
        pending = [message_start(new_message_id(), req.model, usage)]
        bill(Usage(usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens, 0))

        async def flush() -> None:
            if pending:
                await conn.body(b"".join(pending), more=True)
                pending.clear()

        for pause in (pace.stall, pace.ttft):
            if pause:
                await flush()
                if not await conn.sleep(pause):
                    entry["outcome"] = "disconnected"
                    return
        events = [e for i, block in enumerate(reply.blocks) for e in block_events(i, block)]
        if pace.drop:
            # Cut the stream after half of the content: the CLI sees a truncated response.
            pending.extend(data for _, data in events[: max(2, len(events) // 2)])
            await flush()
            entry["outcome"] = "dropped"
            return
        for chars, data in events:
            if pace.tps and chars:
                await flush()
                if not await conn.sleep(estimate_tokens(chars) / pace.tps):
                    entry["outcome"] = "disconnected"
                    return
            pending.append(data)
        pending.append(message_end(reply))
        await conn.body(b"".join(pending), more=False)
        bill(Usage(output_tokens=reply.output_tokens))
        entry["outcome"] = "ok"
