"""A tenacity wait that sleeps until a rate-limit cooldown ends instead of backing off blindly.

Used where a retry may wait in place: a short cooldown on the only eligible account. The caller still holds the wait
to `settings.retry_in_place_max_s` (longer ones defer the job); this wait only says how long the right wait is.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tenacity import RetryCallState
from tenacity.wait import wait_base, wait_random_exponential

from claudeq.models import utcnow


@dataclass(frozen=True)
class Cooldown:
    """A rate-limit cooldown to sit out: until `resets_at` (None: unknown, back off instead)."""

    resets_at: datetime | None


#: The jitter's generator when none is given: one per process (seeding a new one reads the OS's entropy pool, and a
#: wait is built for every delivery), seeded anew in a forked child so forked workers do not jitter alike.
_RNG = random.Random()
os.register_at_fork(after_in_child=_RNG.seed)


class wait_rate_limit(wait_base):
    """Wait until the cooldown's `resets_at` (+ up to `jitter_s`); any other outcome uses `fallback`.

    `extract` finds the Cooldown an attempt asks to sit out (None: none). A Cooldown without `resets_at` also uses
    `fallback`: with no reset to aim at, backing off is all there is.
    """

    def __init__(
        self,
        fallback: wait_base | None = None,
        *,
        extract: Callable[[RetryCallState], Cooldown | None],
        jitter_s: float = 0.5,
        clock: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
    ) -> None:
        self.fallback = fallback if fallback is not None else wait_random_exponential(multiplier=1, max=60)
        self.jitter_s = jitter_s
        self.extract = extract
        self.clock = clock
        self.rng = rng or _RNG

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to sleep before the next attempt."""
        cooldown = self.extract(retry_state)
        if cooldown is None or cooldown.resets_at is None:
            return float(self.fallback(retry_state))
        until_reset = (cooldown.resets_at - self.clock()).total_seconds()
        # Jitter spreads the workers that all waited for the same reset, so they do not arrive in one burst.
        return max(0.0, until_reset) + self.rng.uniform(0, self.jitter_s)
