"""The Lua scripts for tenants and spend caps: each runs atomically inside Redis (docs/architecture.md#tenants).

Their text is in `claudeq/lua/tenant/` (each file's header says its KEYS, ARGV and answer; `settle`, which a job's
terminal write runs too, in `claudeq/lua/lib/settle.lua`; docs/architecture.md#lua-scripts).

Spend is kept per calendar hour (UTC): field `h:<epoch hour>` of a spend hash holds the dollars runs spent in that
hour, added as each attempt finishes; a day's spend is the sum of its 24 hours (read in one HMGET). A run in flight
reserves the budget it was started with (the reserved hash: job id -> dollars), so runs started at the same time
never share the same dollars left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from claudeq.lua import script
from claudeq.script_args import Arg, ScriptArgs, key

#: Admit a run of a tenant or on an account within its caps, reserving its budget.
RESERVE = script("tenant/reserve.lua")
#: Count a finished attempt's cost.
SETTLE = script("tenant/settle.lua")
#: End a run of the tenant and pop its best waiters when it is under its cap again.
RELEASE = script("tenant/release.lua")
#: A deferred job waits for one of its tenant's runs to end.
WAIT = script("tenant/wait.lua")
#: The job's virtual finish tag for weighted fair queueing.
TAG = script("tenant/tag.lua")
#: A job with this tag started: the system virtual time moves up to it.
ADVANCE = script("tenant/advance.lua")
#: The catch-up balances of reserved fair share.
BALANCE = script("tenant/balance.lua")


# ---- the scripts' arguments, by name (claudeq/script_args.py) ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReserveArgs(ScriptArgs):
    SCRIPT = "tenant/reserve.lua"
    members: str = key()
    reserved_hash: str = key()
    spend: str = key()
    job_id: str
    take: str
    max: Arg
    expiry_s: str
    now_s: str
    hour_field: str
    day_first_hour: int
    cap_hour: str
    cap_day: str
    want: str
    share: Arg
    turn_field: str


@dataclass(frozen=True, kw_only=True)
class ReleaseArgs(ScriptArgs):
    SCRIPT = "tenant/release.lua"
    runs: str = key()
    reserved: str = key()
    waiters: str = key()
    job_id: str
    job_key_prefix: str
    max: Arg
    now_s: str


@dataclass(frozen=True, kw_only=True)
class WaitArgs(ScriptArgs):
    SCRIPT = "tenant/wait.lua"
    runs: str = key()
    waiters: str = key()
    deferred: str = key()
    job_id: str
    score: str
    max: int
    now_s: str
    fallback_s: str


@dataclass(frozen=True, kw_only=True)
class TagArgs(ScriptArgs):
    SCRIPT = "tenant/tag.lua"
    fair_share: str = key()
    job: str = key()
    tenant: str
    weight: str


@dataclass(frozen=True, kw_only=True)
class AdvanceArgs(ScriptArgs):
    SCRIPT = "tenant/advance.lua"
    fair_share: str = key()
    tag: str


@dataclass(frozen=True, kw_only=True)
class BalanceArgs(ScriptArgs):
    SCRIPT = "tenant/balance.lua"
    balances: str = key()
    tenant_keys: Sequence[str] = key()
    now_s: str
    bound_s: str
    repay_s: str
    tenants: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class SettleArgs(ScriptArgs):
    SCRIPT = "tenant/settle.lua"
    spend_pairs: Sequence[str] = key()
    job_id: str
    cost: str
    hour_field: str
    tenant_turn: str
    account_turn: str
    sample: str
    ttl_s: Arg
    drop: str
