"""A tenacity wait that sleeps until a rate limit resets instead of backing off blindly.

Used where a retry may wait in place: a short cooldown on the only eligible account. The caller still holds the wait
to `settings.retry_in_place_max_s` (longer ones defer the job); this wait only says how long the right wait is.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from tenacity import RetryCallState
from tenacity.wait import wait_base, wait_random_exponential

from claudeq.errors import RateLimited
from claudeq.models import utcnow


def rate_limited_exception(state: RetryCallState) -> RateLimited | None:
    """The RateLimited the last attempt raised, if that is how it ended."""
    if state.outcome is None or not state.outcome.failed:
        return None
    exc = state.outcome.exception()
    return exc if isinstance(exc, RateLimited) else None


class wait_rate_limit(wait_base):
    """Wait until the rejection's `resets_at` (+ up to `jitter_s`); any other outcome uses `fallback`.

    A RateLimited without `resets_at` also uses `fallback`: with no reset to aim at, backing off is all there is.
    `extract` finds the RateLimited of an attempt (default: the exception it raised), so a retry loop that returns
    results rather than raising can plug in its own.
    """

    def __init__(
        self,
        fallback: wait_base | None = None,
        *,
        jitter_s: float = 0.5,
        extract: Callable[[RetryCallState], RateLimited | None] = rate_limited_exception,
        clock: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
    ) -> None:
        self.fallback = fallback if fallback is not None else wait_random_exponential(multiplier=1, max=60)
        self.jitter_s = jitter_s
        self.extract = extract
        self.clock = clock
        self.rng = rng or random.Random()

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to sleep before the next attempt."""
        limited = self.extract(retry_state)
        if limited is None or limited.resets_at is None:
            return float(self.fallback(retry_state))
        until_reset = (limited.resets_at - self.clock()).total_seconds()
        # Jitter spreads the workers that all waited for the same reset, so they do not arrive in one burst.
        return max(0.0, until_reset) + self.rng.uniform(0, self.jitter_s)
