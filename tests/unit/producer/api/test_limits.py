"""A tenant's submit rate through the HTTP API (producer/api/limits.py), on fakeredis: per configured tenant and
minute, refused whole when a take would pass the limit, and no key for a tenant without one."""

from __future__ import annotations

import fakeredis
import pytest

from claudeq.config.tenants import Tenants
from claudeq.keys import Keys
from claudeq.producer.api.limits import OverRate, SubmitRate

MINUTE = 29_000_000 * 60.0  # the start of some epoch minute


def rate(fake_redis: fakeredis.FakeRedis, **tenants: int | None) -> SubmitRate:
    configured = Tenants.model_validate(
        {"tenants": [{"name": n, "submit_per_minute": limit} for n, limit in tenants.items()], "allow_unknown": True}
    )
    return SubmitRate(fake_redis, Keys("cqt-limits:"), configured)


def test_a_tenant_is_refused_past_its_limit_until_the_minute_turns(fake_redis: fakeredis.FakeRedis) -> None:
    limits = rate(fake_redis, alpha=3)
    limits.take("alpha", 2, now=MINUTE + 10)
    with pytest.raises(OverRate) as over:
        limits.take("alpha", 2, now=MINUTE + 20)  # a batch that would pass it is refused whole
    assert over.value.retry_after_s == 41 and over.value.limit == 3
    limits.take("alpha", 1, now=MINUTE + 30)
    with pytest.raises(OverRate):
        limits.take("alpha", 1, now=MINUTE + 59)
    limits.take("alpha", 3, now=MINUTE + 60)  # a new minute


def test_strangers_count_under_default_and_unlimited_tenants_write_nothing(fake_redis: fakeredis.FakeRedis) -> None:
    limits = rate(fake_redis, default=2, beta=None)
    limits.take("beta", 500, now=MINUTE)
    assert fake_redis.keys("*") == []
    limits.take("stranger:with:colons", 1, now=MINUTE)
    limits.take("another", 1, now=MINUTE)
    with pytest.raises(OverRate) as over:
        limits.take("third", 1, now=MINUTE)
    assert over.value.tenant == "default"
    assert fake_redis.keys("*") == [f"cqt-limits:submit-rate:{int(MINUTE // 60)}".encode()]
    assert 0 < fake_redis.ttl(fake_redis.keys("*")[0]) <= 120
