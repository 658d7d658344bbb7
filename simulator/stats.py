"""Counters for /_sim/stats and the bounded request log for /_sim/requests."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from .usage import Usage

SESSION_LIMIT = 10_000  # sessions whose counters are kept (least recently used dropped)


def _add(into: Usage, usage: Usage) -> None:
    into.input_tokens += usage.input_tokens
    into.output_tokens += usage.output_tokens
    into.cache_read_input_tokens += usage.cache_read_input_tokens
    into.cache_creation_input_tokens += usage.cache_creation_input_tokens


@dataclass
class AccountStats:
    """Per-account counters. `tokens` covers main requests only; title side requests are counted apart."""

    requests: int = 0
    rejected: int = 0
    errors_injected: int = 0
    stalls_injected: int = 0
    drops_injected: int = 0
    auth_failed: int = 0
    title_requests: int = 0
    tokens: Usage = field(default_factory=Usage)
    title_tokens: Usage = field(default_factory=Usage)
    in_flight: int = 0
    max_in_flight: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON view."""
        return {
            "requests": self.requests,
            "rejected": self.rejected,
            "errors_injected": self.errors_injected,
            "stalls_injected": self.stalls_injected,
            "drops_injected": self.drops_injected,
            "auth_failed": self.auth_failed,
            "title_requests": self.title_requests,
            "tokens": self.tokens.as_stats(),
            "title_tokens": self.title_tokens.as_stats(),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }


@dataclass
class SessionStats:
    """Per-session counters, keyed by the CLI's X-Claude-Code-Session-Id header."""

    account: str
    requests: int = 0
    tokens: Usage = field(default_factory=Usage)


class Stats:
    """All counters of one simulator, plus the request log."""

    def __init__(self, log_size: int = 2000):
        self.accounts: dict[str, AccountStats] = {}
        self.sessions: OrderedDict[str, SessionStats] = OrderedDict()
        self.unknown_token = 0  # 401s for tokens that match no configured account (or no token at all)
        self.bad_requests = 0  # 400 / 404 answers to malformed requests
        self.in_flight = 0
        self.max_in_flight = 0
        self.log: deque[dict[str, Any]] = deque(maxlen=log_size)
        #: Every HTTP request received outside /_sim/, whatever its path (GET /_sim/wire): what a client (or a
        #: proxy in front of the simulator) really sent, credentials named by account, never by value.
        self.wire: deque[dict[str, Any]] = deque(maxlen=log_size)
        self._seq = 0
        self._wire_seq = 0

    def account(self, name: str) -> AccountStats:
        """The counters of account `name` (created on first use)."""
        stats = self.accounts.get(name)
        if stats is None:
            stats = self.accounts[name] = AccountStats()
        return stats

    def session(self, session_id: str, account: str) -> SessionStats:
        """The counters of a session (created on first use)."""
        stats = self.sessions.get(session_id)
        if stats is None:
            stats = self.sessions[session_id] = SessionStats(account=account)
            if len(self.sessions) > SESSION_LIMIT:
                self.sessions.popitem(last=False)
        else:
            self.sessions.move_to_end(session_id)
        return stats

    def begin(self, account: str) -> None:
        """A request of `account` is now in flight."""
        a = self.account(account)
        a.in_flight += 1
        a.max_in_flight = max(a.max_in_flight, a.in_flight)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self, account: str) -> None:
        """A request of `account` has finished (answered, dropped or abandoned by the client)."""
        self.account(account).in_flight -= 1
        self.in_flight -= 1

    def bill(self, account: str, session_id: str | None, usage: Usage, title: bool) -> None:
        """Count tokens just sent in message_start / message_delta (or a non-streaming body)."""
        a = self.account(account)
        if title:
            _add(a.title_tokens, usage)
            return
        _add(a.tokens, usage)
        if session_id:
            _add(self.session(session_id, account).tokens, usage)

    def new_entry(self, **fields: Any) -> dict[str, Any]:
        """Append a request-log entry; the caller fills in status and outcome as the request goes on."""
        self._seq += 1
        entry: dict[str, Any] = {"seq": self._seq, "time": time.time(), **fields}
        self.log.append(entry)
        return entry

    def wire_entry(self, **fields: Any) -> None:
        """Append a wire-log entry."""
        self._wire_seq += 1
        self.wire.append({"seq": self._wire_seq, "time": time.time(), **fields})

    def snapshot(self, windows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """The JSON of GET /_sim/stats; `windows` adds each account's window state."""
        accounts = {}
        for name, stats in self.accounts.items():
            accounts[name] = {**stats.as_dict(), "windows": windows.get(name, [])}
        totals: dict[str, Any] = {key: 0 for key, value in AccountStats().as_dict().items() if isinstance(value, int)}
        tokens = Usage()
        title_tokens = Usage()
        for stats in self.accounts.values():
            for key, value in stats.as_dict().items():
                if isinstance(value, int):
                    totals[key] += value
            _add(tokens, stats.tokens)
            _add(title_tokens, stats.title_tokens)
        totals.update(
            {
                "tokens": tokens.as_stats(),
                "title_tokens": title_tokens.as_stats(),
                "unknown_token": self.unknown_token,
                "bad_requests": self.bad_requests,
                # Across accounts: the most requests ever in flight at once.
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
            }
        )
        sessions = {
            sid: {"account": s.account, "requests": s.requests, "tokens": s.tokens.as_stats()}
            for sid, s in self.sessions.items()
        }
        return {"accounts": accounts, "sessions": sessions, "totals": totals}

    def requests(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest `limit` log entries (all kept ones by default), oldest first."""
        entries = list(self.log)
        return entries[-limit:] if limit else entries

    def wire_requests(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest `limit` wire-log entries (all kept ones by default), oldest first."""
        entries = list(self.wire)
        return entries[-limit:] if limit else entries
