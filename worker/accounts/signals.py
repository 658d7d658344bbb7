"""AccountSignals: turns the accounts' rate-limit and auth signals into account state, and reads that state back.

It owns what the runs and the pass-through learn about an account's health: a RateLimitEvent (`observe`), every
forwarded response's limit headers (`record_response`, with its per-account tokens-per-request estimate), a cooldown
(`cool`), a 401 (`disable`), and an operator's `enable` / `clear_cooldown`. These are plain calls: the pass-through's
threads make them as responses pass (the handler, on a Redis thread). AccountManager composes it as
`AccountManager.signals`; the state it writes lives in Redis (AccountStore), so every worker's next acquire sees it.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from claudeq.accounts import AccountStore, window_family
from claudeq.errors import UnknownAccount
from claudeq.models import AccountState, WindowInfo

from ...config.account_pool import AccountPool
from ...config.settings import Settings
from ..passthrough.limit_headers import TOKEN_WINDOWS, LimitFacts, LimitHint
from ..run.outcome import RateLimitSignal

__all__ = ["AccountSignals"]

log = logging.getLogger("claudeq.accounts")


class AccountSignals:
    """The accounts' health signals: rate-limit events and headers, cooldowns, disabling; and their state read back."""

    def __init__(self, settings: Settings, pool: AccountPool, store: AccountStore) -> None:
        self.settings = settings
        self.pool = pool
        self.store = store
        #: The pass-through reads every response's headers: 429s are acted on there (`record_response`), so a
        #: `rejected` RateLimitEvent without a reset adds nothing and must not cool or count a second time.
        self.headers_seen = settings.passthrough
        # account -> (tokens reset, requests remaining, tokens remaining) of its last token reading: the drop between
        # two readings of one window, per request, estimates what one request takes.
        self._last_tokens: dict[str, tuple[float, int, int]] = {}
        self._tokens_per_request: dict[str, float] = {}

    def observe(self, account: str, signal: RateLimitSignal) -> None:
        """Record a RateLimitEvent: rejected cools the account; a warning marks it; allowed clears the warning."""
        if self.pool.get(account) is None:
            log.warning("rate-limit signal for unknown account %s ignored", account)
            return
        now = time.time()
        window = signal.window or "unknown"
        self.store.record_window(
            account,
            window,
            WindowInfo(
                status=signal.status,
                utilization=signal.utilization,
                resets_at=signal.resets_at,
                type=signal.window,
                seen_at=_dt(now),
            ),
        )
        if signal.status == "rejected":
            if not self.headers_seen:
                self.store.incr(account, "rejected")
            if signal.resets_at is not None and signal.resets_at.timestamp() > now:
                until = signal.resets_at
                reason = f"rate limited on {window} until {until.isoformat()}"
            elif self.headers_seen:
                return  # the pass-through saw that 429 and cooled the account from what it said
            else:
                until = _dt(now + self.settings.rate_limit_cooldown_s)
                reason = f"rate limited on {window} (no reset given); cooling {self.settings.rate_limit_cooldown_s:g} s"
            # A model family's own window (seven_day_opus) holds back only that family's jobs on the account.
            self._cool(account, until, reason, window_family(window))
        elif signal.status == "allowed_warning":
            self.store.incr(account, "warnings")
            self.store.set_warning(account, window)
        elif signal.status == "allowed":
            self.store.clear_warning(account)

    def record_response(self, account: str, facts: LimitFacts) -> LimitHint | None:
        """Record the rate-limit facts of one response the pass-through forwarded for `account`.

        Every response: its windows (utilization, remaining, reset) and the readings admission holds on. A 429:
        cool the account until what the API said (`retry-after`, else the reset of what is exhausted), or, with no
        hint at all, back off adaptively (short first, doubling while 429s repeat, `rate_limit_cooldown_s` at
        most; a success starts it short again). Returns what was done about a 429 (None otherwise).
        """
        if self.pool.get(account) is None:
            return None
        success = 200 <= facts.status < 300
        requests = _reading(facts, "requests")
        tokens = self._tightest_tokens(facts)
        if facts.windows or success:
            self.store.record_limits(
                account,
                facts.windows,
                requests=requests,
                tokens=tokens,
                tokens_per_request=self._estimate(account, requests, tokens),
                success=success,
            )
        self._unified_state(account, facts)
        readings = [
            (name, info.utilization, info.resets_at.timestamp())
            for name, info in facts.windows.items()
            if info.utilization is not None and info.resets_at is not None
        ]
        if readings:
            self.store.record_utilization(account, readings)
        if not facts.rejected:
            return None
        self.store.incr(account, "rejected")
        hint = facts.until()
        if hint is not None:
            until, said = hint
            family = _rejected_family(facts)
            scope = "" if family == "-" else f" ({family} jobs only)"
            reason = f"429: {said}, cooling until {until.isoformat()}{scope}"
            self._cool(account, until, reason, family)
            return LimitHint(until, said)
        base = min(self.settings.rate_limit_backoff_s, self.settings.rate_limit_cooldown_s)
        until, n = self.store.backoff(
            account, facts.seen_at, base, self.settings.rate_limit_cooldown_s, "429 without a hint: backing off"
        )
        wait = until.timestamp() - facts.seen_at
        log.info("account %s: 429 without a hint (%d in a row); cooling %.1f s", account, n, wait)
        return LimitHint(until, f"no hint: backoff {wait:.3g} s ({n} in a row)", adaptive=True)

    def _unified_state(self, account: str, facts: LimitFacts) -> None:
        # OAuth: warnings from the headers themselves, whether or not the CLI emits a RateLimitEvent for them.
        if facts.unified_status is None or facts.rejected:
            return
        warned = [name for name, w in facts.windows.items() if w.status == "allowed_warning"]
        if warned:
            self.store.set_warning(account, warned[0])
        elif facts.unified_status == "allowed":
            self.store.clear_warning(account)

    @staticmethod
    def _tightest_tokens(facts: LimitFacts) -> tuple[int, float, int | None] | None:
        readings = []
        for name in TOKEN_WINDOWS:
            info = facts.windows.get(name)
            reading = _reading(facts, name)
            if info is not None and reading is not None:
                readings.append((reading[0] / info.limit if info.limit else 0.0, reading))
        return min(readings)[1] if readings else None

    def _estimate(
        self,
        account: str,
        requests: tuple[int, float, int | None] | None,
        tokens: tuple[int, float, int | None] | None,
    ) -> float | None:
        if tokens is None or requests is None:
            return None
        last = self._last_tokens.get(account)
        self._last_tokens[account] = (tokens[1], requests[0], tokens[0])
        if last is None or abs(last[0] - tokens[1]) > 0.5:
            return None
        spent_requests, spent_tokens = last[1] - requests[0], last[2] - tokens[0]
        if spent_requests <= 0 or spent_tokens < 0:
            return None
        sample = spent_tokens / spent_requests
        previous = self._tokens_per_request.get(account)
        estimate = sample if previous is None else max(sample, 0.5 * previous + 0.5 * sample)
        self._tokens_per_request[account] = estimate
        return estimate

    def cool(self, account: str, until: datetime, reason: str) -> None:
        """Cool an account until `until` (e.g. a 429 on an API-key account, which sends no RateLimitEvent)."""
        if self.pool.get(account) is None:
            log.warning("cooldown for unknown account %s ignored", account)
            return
        self._cool(account, until, reason)

    def default_cooldown_end(self) -> datetime:
        """When a cooldown without a known reset ends if it started now."""
        return _dt(time.time() + self.settings.rate_limit_cooldown_s)

    def disable(self, account: str, reason: str) -> None:
        """Disable the account (e.g. 401): no run goes there until an operator enables it."""
        self.store.disable(account, reason)
        log.warning("account %s disabled: %s", account, reason)

    def enable(self, account: str) -> None:
        """Enable a disabled account."""
        self.store.enable(account)
        log.info("account %s enabled", account)

    def clear_cooldown(self, account: str) -> None:
        """End the account's cooldown now."""
        self.store.clear_cooldown(account)
        log.info("account %s cooldown cleared", account)

    def states(self) -> list[AccountState]:
        """Every configured account's state, in pool order."""
        return self.store.states()

    def state(self, account: str) -> AccountState:
        """One account's state; UnknownAccount if not configured."""
        if self.pool.get(account) is None:
            raise UnknownAccount(account)
        return self.store.state(account)

    def _cool(self, account: str, until: datetime, reason: str, family: str = "-") -> None:
        if self.store.cool(account, until, reason, family):
            log.info("account %s cooling until %s: %s", account, until.isoformat(), reason)


def _rejected_family(facts: LimitFacts) -> str:
    """The model family a 429 is about: when every window the API reports rejected is one family's own
    (seven_day_opus), only that family's jobs are held back; `-` (the whole account) otherwise."""
    rejected = {window_family(name) for name, info in facts.windows.items() if info.status == "rejected"}
    if len(rejected) == 1 and facts.retry_after_s is None:
        return rejected.pop()
    return "-"


def _reading(facts: LimitFacts, window: str) -> tuple[int, float, int | None] | None:
    """(remaining, reset epoch s, limit) of one family in a response, when remaining and reset were sent."""
    info = facts.windows.get(window)
    if info is None or info.remaining is None or info.resets_at is None:
        return None
    return info.remaining, info.resets_at.timestamp(), info.limit


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)
