"""Spend hashes keep only the hours a cap can still read (docs/architecture.md#tenants): a month of spend leaves a
day's fields, not 720, and the windows still add up."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.script_calls import run_call
from claudeq.tenants import DAY_S, HOUR_S, AttemptCost, TenantStore, day_start_hour

#: Midnight UTC of a fixed day, so the windows below are calendar windows whatever the clock says.
START = 20_000 * DAY_S


def _hours(client: redis.Redis, key: str) -> list[int]:
    fields = [f.decode() for f in client.hkeys(key)]
    return sorted(int(f[2:]) for f in fields if f.startswith("h:"))


@pytest.mark.parametrize("capped", [True, False], ids=["learning-a-turn", "uncapped-account"])
def test_a_month_of_spend_keeps_only_the_hours_the_longest_cap_window_reads(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path, capped: bool
) -> None:
    """Thirty simulated days of a cost every hour, through both ways a cost is counted (a hash a cap reads learns
    the turn estimate: HMGET + HSET; an uncapped account's: HINCRBYFLOAT): the tenant's and the account's spend
    hashes end with at most the 24 hours of a day, the current day's spend is exact, and the hash still expires."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "team-a"\nmax_cost_usd_per_day = 1000\n')
    keys = Keys(settings.key_prefix)
    store = TenantStore(redis_client, keys, settings.model_copy(update={"tenants_file": tenants}).tenants)
    days = 30
    for hour in range(days * 24):
        now = START + hour * HOUR_S + 60
        run_call(
            store.settle_call(
                AttemptCost("team-a", "acct-1", f"job-{hour}", 0.01, model="haiku", account_capped=capped), now=now
            )
        )
        run_call(
            store.settle_call(
                AttemptCost("team-a", "acct-1", f"job-{hour}b", 0.02, model="haiku", account_capped=capped),
                now=now + 600,
            )
        )

    last = START + (days * 24 - 1) * HOUR_S + 660
    for key in (keys.tenant_spend("team-a"), keys.account_spend("acct-1")):
        hours = _hours(redis_client, key)
        assert len(hours) <= 24, f"{key} keeps {len(hours)} hour fields"
        assert hours[0] <= day_start_hour(last), "the current calendar day must stay whole"
        assert 0 < redis_client.ttl(key) <= 2 * DAY_S
    hour_spend, day_spend = store.spend("tenant", "team-a", now=last)
    assert hour_spend == pytest.approx(0.03)
    assert day_spend == pytest.approx(0.03 * 24)
    assert store.spend("account", "acct-1", now=last) == pytest.approx((0.03, 0.03 * 24))
