"""A tenant's submit rate through the HTTP API (its `submit_per_minute` in the tenants file): 429 when over it.

A fixed window of one minute per configured tenant, counted in Redis so every API server of the fleet shares it
(`Keys.submit_rate`). Only a configured tenant's name is ever part of a key: a spec naming a stranger is counted
under the entry that governs it (`default`), and a tenant without a limit writes nothing.
"""

from __future__ import annotations

import time

import redis

from claudeq.keys import Keys

from ...config.tenants import Tenants

WINDOW_S = 60


class OverRate(Exception):
    """A tenant's submits this minute would pass its limit: try again after `retry_after_s`."""

    def __init__(self, tenant: str, limit: int, retry_after_s: int) -> None:
        super().__init__(f"tenant {tenant!r} may submit {limit} jobs a minute through the API; try again later")
        self.tenant = tenant
        self.limit = limit
        self.retry_after_s = retry_after_s


class SubmitRate:
    """Counts submits per tenant and minute against the tenants' `submit_per_minute`."""

    def __init__(self, client: redis.Redis, keys: Keys, tenants: Tenants) -> None:
        self.redis = client
        self.keys = keys
        self.tenants = tenants

    def take(self, tenant: str, count: int, now: float | None = None) -> None:
        """Count `count` submits of `tenant` now; OverRate (counting nothing) when that would pass its limit."""
        governing = self.tenants.governing(tenant)
        limit = governing.submit_per_minute
        if limit is None or not self.tenants.configured:
            return
        now = time.time() if now is None else now
        minute = int(now // WINDOW_S)
        key = self.keys.submit_rate(governing.name, minute)
        pipe = self.redis.pipeline(transaction=True)
        pipe.incrby(key, count)
        pipe.expire(key, 2 * WINDOW_S)
        used = int(pipe.execute()[0])
        if used > limit:
            self.redis.decrby(key, count)
            raise OverRate(governing.name, limit, max(1, int((minute + 1) * WINDOW_S - now) + 1))
