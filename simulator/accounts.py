"""Simulated accounts: token lookup, rate-limit windows and the headers the CLI reads from them.

Header names and the rules the CLI applies to them are in docs/cli-behaviour.md#rate-limit-headers-and-events:
per-window `anthropic-ratelimit-unified-{5h,7d,7d_oi,overage}-*` headers; a warning needs `-surpassed-threshold`.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .config import AccountConfig, AccountKind, SimConfig, WindowConfig
from .errors import ApiError
from .usage import PromptCache

# Window family -> the claim name the CLI reports as `rateLimitType`.
CLAIMS: dict[str, str] = {
    "5h": "five_hour",
    "7d": "seven_day",
    "7d_oi": "seven_day_overage_included",
    "overage": "overage",
    "7d_opus": "seven_day_opus",
    "7d_sonnet": "seven_day_sonnet",
}
# Model-family windows: only requests for a model whose id contains the family's name count against them.
MODEL_FAMILY_WINDOWS: dict[str, str] = {"7d_opus": "opus", "7d_sonnet": "sonnet"}

UNIFIED = "anthropic-ratelimit-unified"

# With no configured accounts every token gets an account of its own with this (generous) window.
GENEROUS_WINDOW = WindowConfig(family="5h", length_s=18000, requests=1_000_000)
ANON_LIMIT = 1_000  # such accounts kept at most (the least recently used is forgotten)

# Given `-W-utilization` and `-W-reset` but no `-W-surpassed-threshold`, the CLI warns on its own when utilization
# ≥ u while at most the fraction e of the window has elapsed (it assumes the family's real length); see
# docs/cli-behaviour.md#rate-limit-headers-and-events.
_CLI_OWN_WARNINGS: dict[str, tuple[float, tuple[tuple[float, float], ...]]] = {
    "5h": (5 * 3600, ((0.9, 0.72),)),
    "7d": (7 * 86400, ((0.75, 0.6), (0.5, 0.35), (0.25, 0.15))),
}
_ELAPSED_MARGIN = 0.01  # the CLI reads the headers a little later than they are made


def cli_would_warn(family: str, utilization: float, reset: int, now: float) -> bool:
    """Whether the CLI would turn a window's utilization and reset into an `allowed_warning` by itself."""
    rule = _CLI_OWN_WARNINGS.get(family)
    if rule is None:
        return False
    length, thresholds = rule
    elapsed = 1 - (reset - now) / length
    return any(utilization >= u and elapsed <= e + _ELAPSED_MARGIN for u, e in thresholds)


def _fmt(x: float) -> str:
    return str(round(x, 4))


@dataclass
class Window:
    """Run-time state of one window: when it started and what it has used."""

    config: WindowConfig
    started_at: float | None = None
    requests: int = 0
    tokens: int = 0

    @classmethod
    def from_config(cls, config: WindowConfig) -> Window:
        """A fresh window carrying the configured head start (`used_requests`, `used_tokens`)."""
        return cls(config=config, requests=config.used_requests, tokens=config.used_tokens)

    def roll(self, now: float) -> None:
        """Start the window at its first use, and a new one (empty) once it has reset."""
        if self.started_at is None:
            self.started_at = now
        elif now >= self.started_at + self.config.length_s:
            self.started_at, self.requests, self.tokens = now, 0, 0

    def reset_at(self, now: float) -> int:
        """Epoch second at which the window resets (as sent in headers)."""
        start = self.started_at if self.started_at is not None else now
        return math.ceil(start + self.config.length_s)

    def seconds_left(self, now: float) -> float:
        """Seconds until the window resets."""
        start = self.started_at if self.started_at is not None else now
        return max(0.0, start + self.config.length_s - now)

    def utilization(self) -> float:
        """Fraction of the window used, the larger of requests and tokens, capped at 1."""
        parts = []
        for used, limit in ((self.requests, self.config.requests), (self.tokens, self.config.tokens)):
            if limit is not None:
                parts.append(1.0 if limit == 0 else used / limit)
        return min(max(parts, default=0.0), 1.0)

    def exhausted(self) -> bool:
        """True when the next request must be rejected."""
        c = self.config
        return (c.requests is not None and self.requests >= c.requests) or (
            c.tokens is not None and self.tokens >= c.tokens
        )

    def warning(self) -> bool:
        """True once utilization has reached the warning threshold."""
        return self.config.warn_at is not None and self.utilization() >= self.config.warn_at

    def stats(self, now: float) -> dict[str, Any]:
        """JSON view for /_sim/stats."""
        return {
            "family": self.config.family,
            "length_s": self.config.length_s,
            "requests": self.requests,
            "tokens": self.tokens,
            "limit_requests": self.config.requests,
            "limit_tokens": self.config.tokens,
            "utilization": round(self.utilization(), 4),
            "resets_at": self.reset_at(now),
            "status": "rejected" if self.exhausted() else "allowed_warning" if self.warning() else "allowed",
        }


@dataclass
class Account:
    """A simulated account. `token_digest` identifies it internally; the token itself is not kept here."""

    name: str
    kind: AccountKind
    auth_fail: bool = False
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    windows: list[Window] = field(default_factory=list)
    cache: PromptCache = field(default_factory=PromptCache)

    def applicable(self, model: str | None) -> list[Window]:
        """The windows a request for `model` counts against: every window but other model families' own."""
        name = (model or "").lower()
        return [
            w
            for w in self.windows
            if w.config.family not in MODEL_FAMILY_WINDOWS or MODEL_FAMILY_WINDOWS[w.config.family] in name
        ]

    def admit(self, now: float, model: str | None = None) -> Window | None:
        """Count a request for `model` against every window it applies to; return the blocking window instead if
        one of them is exhausted."""
        windows = self.applicable(model)
        for w in windows:
            w.roll(now)
        blocking = [w for w in windows if w.exhausted()]
        if blocking:
            # Blocked until the last of the exhausted windows resets.
            return max(blocking, key=lambda w: w.reset_at(now))
        for w in windows:
            w.requests += 1
        return None

    def utilization_before(self, now: float, model: str | None = None) -> dict[str, float]:
        """Utilization per window (CLI name) a request for `model` finds before it is counted."""
        out = {}
        for w in self.applicable(model):
            w.roll(now)
            out[CLAIMS[w.config.family]] = round(w.utilization(), 4)
        return out

    def add_tokens(self, tokens: int, model: str | None = None) -> None:
        """Charge tokens to every window a request for `model` counts against."""
        for w in self.applicable(model) if model is not None else self.windows:
            w.tokens += tokens

    def _representative(self, now: float) -> Window | None:
        return max(self.windows, key=lambda w: w.utilization(), default=None)

    def allowed_headers(self, now: float) -> dict[str, str]:
        """Rate-limit headers for an admitted request."""
        if self.kind == "api_key":
            return self._api_key_headers(now)
        rep = self._representative(now)
        if rep is None:
            return {}
        headers = {
            f"{UNIFIED}-status": "allowed",
            f"{UNIFIED}-reset": str(rep.reset_at(now)),
            f"{UNIFIED}-representative-claim": CLAIMS[rep.config.family],
        }
        for w in self.windows:
            prefix = f"{UNIFIED}-{w.config.family}"
            warn = w.warning()
            utilization, reset = round(w.utilization(), 4), w.reset_at(now)
            if warn or not cli_would_warn(w.config.family, utilization, reset, now):
                # Left out when the CLI would warn on its own although this window is not meant to warn.
                headers[f"{prefix}-utilization"] = _fmt(utilization)
            headers[f"{prefix}-reset"] = str(reset)
            headers[f"{prefix}-status"] = "allowed_warning" if warn else "allowed"
            if warn and w.config.warn_at is not None:
                # Without this header the CLI does not warn (it maps the status alone to "allowed").
                headers[f"{prefix}-surpassed-threshold"] = _fmt(w.config.warn_at)
        return headers

    def rejection(self, window: Window, now: float) -> ApiError:
        """The 429 for a request that `admit` refused."""
        reset = window.reset_at(now)
        if self.kind == "api_key":
            headers = self._api_key_headers(now)
            headers["retry-after"] = str(max(1, math.ceil(window.seconds_left(now))))
            return ApiError(429, "Number of requests has exceeded your rate limit.", headers)
        headers = self.allowed_headers(now)
        prefix = f"{UNIFIED}-{window.config.family}"
        headers.update(
            {
                f"{UNIFIED}-status": "rejected",
                f"{UNIFIED}-reset": str(reset),
                f"{UNIFIED}-representative-claim": CLAIMS[window.config.family],
                f"{prefix}-status": "rejected",
                f"{prefix}-utilization": _fmt(window.utilization()),
                f"{prefix}-reset": str(reset),
            }
        )
        return ApiError(429, None, headers)

    def _api_key_headers(self, now: float) -> dict[str, str]:
        # The classic per-minute headers of API-key organisations, from the first window limiting each kind.
        headers: dict[str, str] = {}
        for kind in ("requests", "tokens"):
            for w in self.windows:
                limit = getattr(w.config, kind)
                if limit is not None:
                    reset = datetime.fromtimestamp(w.reset_at(now), UTC).isoformat().replace("+00:00", "Z")
                    headers[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
                    headers[f"anthropic-ratelimit-{kind}-remaining"] = str(max(0, limit - getattr(w, kind)))
                    headers[f"anthropic-ratelimit-{kind}-reset"] = reset
                    break
        return headers

    def window_stats(self, now: float) -> list[dict[str, Any]]:
        """JSON view of the windows for /_sim/stats."""
        return [w.stats(now) for w in self.windows]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AccountRegistry:
    """Maps tokens to accounts. Tokens are held only as SHA-256 digests."""

    def __init__(self, config: SimConfig, previous: AccountRegistry | None = None):
        self.open = not config.accounts  # no accounts configured: any token is welcome
        self.accounts: dict[str, Account] = {}
        self._by_digest: dict[str, Account] = {}
        self._anonymous: OrderedDict[str, str] = OrderedDict()  # digest -> name, least recently used first
        for ac in config.accounts:
            account = self._build(ac, previous.accounts.get(ac.name) if previous else None)
            self.accounts[ac.name] = account
            self._by_digest[_digest(ac.token.get_secret_value())] = account

    @staticmethod
    def _build(ac: AccountConfig, old: Account | None) -> Account:
        windows = []
        for wc in ac.windows:
            window = Window.from_config(wc)
            # A run-time reconfiguration keeps what a same-family, same-length window has used.
            for ow in old.windows if old else []:
                if (ow.config.family, ow.config.length_s) == (wc.family, wc.length_s):
                    window = Window(config=wc, started_at=ow.started_at, requests=ow.requests, tokens=ow.tokens)
            windows.append(window)
        return Account(
            name=ac.name,
            kind=ac.kind,
            auth_fail=ac.auth_fail,
            ttft_s=ac.ttft_s,
            tokens_per_s=ac.tokens_per_s,
            windows=windows,
            cache=old.cache if old else PromptCache(),
        )

    def name_of(self, token: str) -> str | None:
        """The name of the configured (or already seen anonymous) account of `token`, without creating one."""
        account = self._by_digest.get(_digest(token))
        return account.name if account is not None else None

    def lookup(self, token: str, kind: AccountKind) -> Account | None:
        """The account of a token, or None when accounts are configured and the token is unknown."""
        digest = _digest(token)
        account = self._by_digest.get(digest)
        if not self.open:
            return account
        if account is not None:
            self._anonymous.move_to_end(digest)
            return account
        name = f"anon-{kind}-{digest[:10]}"
        account = Account(name=name, kind=kind, windows=[Window.from_config(GENEROUS_WINDOW)])
        self.accounts[name] = account
        self._by_digest[digest] = account
        self._anonymous[digest] = name
        if len(self._anonymous) > ANON_LIMIT:
            old_digest, old_name = self._anonymous.popitem(last=False)
            del self._by_digest[old_digest]
            self.accounts.pop(old_name, None)
        return account
