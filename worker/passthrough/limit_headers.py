"""What the rate-limit headers of one Messages API response say, as plain data (pure: no I/O, no clock of its own).

The worker's pass-through (`claudeq.worker.passthrough.server`) reads the headers of every response it forwards and
hands them here. Two families exist:

* API-key accounts: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
  (reset in RFC 3339) on every response, and `retry-after` (seconds) on a 429.
* OAuth (subscription) accounts: `anthropic-ratelimit-unified-status`/`-reset` (epoch seconds) and per window
  `anthropic-ratelimit-unified-<W>-{utilization,reset,status,surpassed-threshold}`, W in 5h, 7d, 7d_oi, 7d_<model>,
  overage.

`LimitFacts.until()` answers the one question a 429 raises: until when did the API say to stay away?
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from claudeq.models import WindowInfo

#: API-key header families -> the window name they are recorded under.
API_KEY_FAMILIES: dict[str, str] = {
    "requests": "requests",
    "tokens": "tokens",
    "input-tokens": "input_tokens",
    "output-tokens": "output_tokens",
}
#: Token families, most general first: admission holds on the tightest of them.
TOKEN_WINDOWS: tuple[str, ...] = ("tokens", "input_tokens", "output_tokens")

UNIFIED = "anthropic-ratelimit-unified"
_UNIFIED_WINDOW = re.compile(
    r"^anthropic-ratelimit-unified-(5h|7d|7d_[a-z0-9]+|overage)-(utilization|reset|status|surpassed-threshold)$"
)
_API_KEY = re.compile(r"^anthropic-ratelimit-(requests|tokens|input-tokens|output-tokens)-(limit|remaining|reset)$")
_MAX_RETRY_AFTER_S = 7 * 86400.0  # a longer hint is a broken header, not advice


def unified_window_name(code: str) -> str:
    """The CLI's name of a unified window header code: 5h -> five_hour, 7d_opus -> seven_day_opus."""
    if code == "5h":
        return "five_hour"
    if code == "7d":
        return "seven_day"
    if code == "7d_oi":
        return "seven_day_overage_included"
    if code.startswith("7d_"):
        return "seven_day_" + code[3:]
    return code


def parse_reset(value: str | None) -> datetime | None:
    """A reset header: epoch seconds (unified) or RFC 3339 (API key); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(number) or number <= 0 or number > 1e11:
            return None
        return datetime.fromtimestamp(number, UTC)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """`retry-after` in seconds from now (delta seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now
        except (TypeError, ValueError, IndexError):
            return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, _MAX_RETRY_AFTER_S)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number >= 0 else None


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class LimitFacts:
    """The rate-limit facts of one response."""

    status: int
    seen_at: float  # epoch s
    retry_after_s: float | None = None
    unified_status: str | None = None  # allowed | allowed_warning | rejected
    unified_reset: datetime | None = None
    windows: dict[str, WindowInfo] = field(default_factory=dict)

    @property
    def rejected(self) -> bool:
        """The API refused the request for its rate limit."""
        return self.status == 429

    @property
    def empty(self) -> bool:
        """Nothing rate-limit related was sent (e.g. a 500, or a server that sends no such headers)."""
        return self.retry_after_s is None and self.unified_status is None and not self.windows

    def exhausted(self) -> list[tuple[str, datetime]]:
        """Windows the API reports as used up (remaining 0 or status rejected), with their reset."""
        out: list[tuple[str, datetime]] = []
        for name, info in self.windows.items():
            if info.resets_at is None:
                continue
            if info.remaining == 0 or info.status == "rejected":
                out.append((name, info.resets_at))
        return out

    def until(self) -> tuple[datetime, str] | None:
        """For a 429: when the API said the account may try again, and how it said so; None without a hint.

        `retry-after` is the API's own answer and wins; else the reset of the unified rejection, else the latest
        reset of the windows reported exhausted.
        """
        if not self.rejected:
            return None
        now = datetime.fromtimestamp(self.seen_at, UTC)
        if self.retry_after_s is not None:
            return now + timedelta(seconds=self.retry_after_s), f"retry-after {self.retry_after_s:g} s"
        if self.unified_status == "rejected" and self.unified_reset is not None and self.unified_reset > now:
            return self.unified_reset, "unified reset"
        resets = [(at, name) for name, at in self.exhausted() if at > now]
        if resets:
            at, name = max(resets)
            return at, f"{name} reset"
        return None


def parse(headers: Iterable[tuple[str, str]], status: int, now: float) -> LimitFacts:
    """The rate-limit facts in `headers` (names in any case) of a response with `status`, seen at `now`."""
    api: dict[str, dict[str, str]] = {}
    unified: dict[str, dict[str, str]] = {}
    retry_after: str | None = None
    unified_status: str | None = None
    unified_reset: str | None = None
    for raw_name, value in headers:
        name = raw_name.lower()
        if name == "retry-after":
            retry_after = value
        elif not name.startswith("anthropic-ratelimit-"):
            continue
        elif name == f"{UNIFIED}-status":
            unified_status = value.strip()
        elif name == f"{UNIFIED}-reset":
            unified_reset = value
        elif m := _API_KEY.match(name):
            api.setdefault(m.group(1), {})[m.group(2)] = value
        elif m := _UNIFIED_WINDOW.match(name):
            unified.setdefault(m.group(1), {})[m.group(2)] = value
    seen = datetime.fromtimestamp(now, UTC)
    windows: dict[str, WindowInfo] = {}
    for family, fields in api.items():
        limit, remaining = _int(fields.get("limit")), _int(fields.get("remaining"))
        utilization = None
        if limit and remaining is not None:
            utilization = min(1.0, max(0.0, 1 - remaining / limit))
        window = API_KEY_FAMILIES[family]
        windows[window] = WindowInfo(
            status="rejected" if remaining == 0 else "allowed",
            utilization=utilization,
            resets_at=parse_reset(fields.get("reset")),
            type=window,
            seen_at=seen,
            limit=limit,
            remaining=remaining,
        )
    for code, fields in unified.items():
        window = unified_window_name(code)
        utilization = _float(fields.get("utilization"))
        windows[window] = WindowInfo(
            status=(fields.get("status") or "allowed").strip(),
            utilization=None if utilization is None else min(1.0, max(0.0, utilization)),
            resets_at=parse_reset(fields.get("reset")),
            type=window,
            seen_at=seen,
            surpassed_threshold=_float(fields.get("surpassed-threshold")),
        )
    return LimitFacts(
        status=status,
        seen_at=now,
        retry_after_s=parse_retry_after(retry_after, now),
        unified_status=unified_status,
        unified_reset=parse_reset(unified_reset),
        windows=windows,
    )


@dataclass(frozen=True)
class LimitHint:
    """What the pass-through did about the last 429 a run got: cooled its account until `until`, and why."""

    until: datetime
    reason: str  # e.g. "retry-after 3 s", "unified reset", "no hint: backoff 4 s (2nd 429 in a row)"
    adaptive: bool = False  # no hint in the response: the adaptive backoff chose `until`
