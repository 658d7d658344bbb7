"""TenantStore: a tenant's runs in flight, its waiters, and the spend of tenants and accounts per calendar window.

The worker's AccountManager admits runs through it (claudeq/tenants/_scripts.py, atomic); `claudeq tenants` and the
exporter read it without importing `worker`. Windows are calendar windows in UTC: the hour (`h:<epoch s // 3600>`)
and the day (`d:<epoch s // 86400>`); a cap's window rolls at the top of the hour / at midnight UTC.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import redis

from claudeq.config.account_pool import AccountConfig
from claudeq.config.tenants import DEFAULT_TENANT, TenantConfig, Tenants
from claudeq.keys import Keys, text
from claudeq.lua.results import Reserve
from claudeq.script_calls import Call, PipeCall, ScriptCall, done, run_call

from . import _scripts as tenant_scripts

HOUR_S = 3600
DAY_S = 86400
#: Spend hashes keep their windows this long after the first cost of the last hour with a cost (a day's field must
#: outlive its day).
SPEND_TTL_S = 2 * DAY_S

Window = Literal["hour", "day"]


def hour_field(now: float) -> str:
    """The spend field of the calendar hour (UTC) `now` falls in."""
    return f"h:{int(now // HOUR_S)}"


def day_start_hour(now: float) -> int:
    """The epoch hour the calendar day (UTC) `now` falls in starts with: a day's spend is the sum of its 24 hours."""
    return int(now // DAY_S) * (DAY_S // HOUR_S)


def day_hour_fields(now: float) -> list[str]:
    """The spend fields of the 24 hours of the calendar day (UTC) `now` falls in, in order."""
    first = day_start_hour(now)
    return [f"h:{first + i}" for i in range(DAY_S // HOUR_S)]


def turn_field(model: str | None) -> str:
    """The spend-hash field holding what one turn of `model`'s runs costs (None: the default model)."""
    return f"turn:{model or '-'}"


def window_end(window: Window, now: float) -> datetime:
    """When the calendar window `now` falls in rolls over."""
    size = HOUR_S if window == "hour" else DAY_S
    return datetime.fromtimestamp((int(now // size) + 1) * size, UTC)


@dataclass(frozen=True)
class Admitted:
    """A run may start; `budget_usd` is what it may spend at most (None: no cap applies); `turn_usd` the estimated
    cost of one turn reserved beside it (the CLI may run one turn past its budget; 0: none known or no cap)."""

    budget_usd: float | None
    turn_usd: float = 0.0


@dataclass(frozen=True)
class AtMax:
    """The tenant has `max_concurrency` runs in flight."""


@dataclass(frozen=True)
class Reserved:
    """What is left in a capped window is reserved by the runs in flight: wait for one of them to end."""

    window: Window


@dataclass(frozen=True)
class OverBudget:
    """Nothing is left in a capped window until it rolls over at `until`."""

    window: Window
    until: datetime


Admission = Admitted | AtMax | Reserved | OverBudget


@dataclass(frozen=True)
class Spend:
    """What was spent in the current calendar hour and day, and the caps (None: no cap)."""

    hour: float
    day: float
    cap_hour: float | None
    cap_day: float | None


@dataclass(frozen=True)
class AttemptCost:
    """What a finished attempt settles (`TenantStore.settle_call`): its real cost, counted against its tenant's spend
    (None: no tenant's; a fleet without a tenants file keeps none) and its account's; whether its run had reserved a
    budget to drop (False: it was started without one); and what one turn of `model`'s runs costs (the cost over its
    `turns`; a run that reported none counts as one turn: an overestimate only makes runs wait), learned where a cap
    may read it: the tenant's, and the account's when it has a spend cap (`account_capped`)."""

    tenant: str | None
    account: str
    job_id: str
    cost_usd: float
    model: str | None = None
    turns: int | None = None
    reserved: bool = True
    account_capped: bool = True


@dataclass(frozen=True)
class TenantUsage:
    """One tenant as `claudeq tenants` shows it."""

    name: str
    in_flight: int
    waiting: int
    max_concurrency: int | None
    weight: float
    spend: Spend
    on_budget: str
    #: Its share cap under reserved fair share now (None: `reserve_share` off): its weighted share of the fleet's
    #: slots among the tenants active now; it holds at most the lower of this and `max_concurrency`.
    share_cap: int | None = None
    #: Its catch-up balance under reserved fair share, in slot-seconds (+ owed, - owing; None: none kept): while it is
    #: past +-0.5 its share cap is ceil(|balance| / run length, at least 5 s) slots above (below) its weighted share.
    balance: float | None = None

    @property
    def cap(self) -> int | None:
        """The most runs it may hold now: its `max_concurrency` and its share cap, whichever is lower."""
        caps = [c for c in (self.max_concurrency, self.share_cap) if c is not None]
        return min(caps) if caps else None

    def public(self) -> dict[str, object]:
        """The JSON form of `claudeq tenants --json`."""
        return {
            "name": self.name,
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "max_concurrency": self.max_concurrency,
            "share_cap": self.share_cap,
            "balance_slot_s": self.balance,
            "weight": self.weight,
            "on_budget": self.on_budget,
            "spend_usd": {"hour": self.spend.hour, "day": self.spend.day},
            "cap_usd": {"hour": self.spend.cap_hour, "day": self.spend.cap_day},
        }


#: Slot-seconds of balance within which a tenant's share cap does not move (the balance is moved on at most every
#: 0.25 s per worker, from the runs held at that moment).
BALANCE_DEADBAND = 0.5
#: A balance stays within +-(share x this many seconds): what a tenant can be owed, or owe, is a minute of its share.
BALANCE_BOUND_S = 60.0
#: A balance moves the cap by one slot per this many slot-seconds (rounded up), or per the fleet's typical run length
#: when runs last longer: an extra slot repays about one run's length of debt, so a debt is repaid in about one run
#: (the owed tenant's backlog starts as the owing tenant's runs end) instead of one slot at a time, and long runs are
#: not given more extra slots than the debt they repay.
BALANCE_REPAY_S = 5.0
#: The '|'-prefixed field of the balance hash where workers leave their repay_s (no tenant name holds a '|').
REPAY_FIELD = "|repay_s"


def caught_up(share: int, balance: float, repay_s: float = BALANCE_REPAY_S) -> int:
    """A share cap moved by the tenant's catch-up balance: while it is owed (it ran fewer than its share with jobs
    waiting, e.g. while another tenant's runs from before it became active held its share) it may hold
    ceil(balance / repay_s) slots more, while it owes as many fewer (at least 1), until the balances are even;
    `repay_s`: the slot-seconds one extra slot repays, at least BALANCE_REPAY_S (docs/architecture.md#fair-share)."""
    if abs(balance) <= BALANCE_DEADBAND:
        return share
    slots = math.ceil(abs(balance) / max(BALANCE_REPAY_S, repay_s))
    return share + slots if balance > 0 else max(1, share - slots)


def _opt(value: float | None) -> str:
    return "" if value is None else repr(value)


def effective_cap(tenant: TenantConfig, share: int | None) -> int | None:
    """The most runs `tenant` may hold: its `max_concurrency` and its share cap (reserve_share), whichever is lower
    (None: neither applies)."""
    caps = [c for c in (tenant.max_concurrency, share) if c is not None]
    return min(caps) if caps else None


class TenantStore:
    """Reads and writes tenants' runs, waiters and spend, and accounts' spend; multi-step changes are Lua scripts."""

    def __init__(self, client: redis.Redis, keys: Keys, tenants: Tenants, accounts: Sequence[str] = ()) -> None:
        self.redis = client
        self.keys = keys
        self.tenants = tenants
        #: The fleet's account names: without a tenants file, `default`'s spend is the sum of theirs (no tenant
        #: spend is kept then: a run's end writes its account's alone).
        self.accounts = list(accounts)
        self._reserve = client.register_script(tenant_scripts.RESERVE)
        self._release = client.register_script(tenant_scripts.RELEASE)
        self._wait = client.register_script(tenant_scripts.WAIT)
        self._tag = client.register_script(tenant_scripts.TAG)
        self._advance = client.register_script(tenant_scripts.ADVANCE)
        self._settle = client.register_script(tenant_scripts.SETTLE)
        self._balance = client.register_script(tenant_scripts.BALANCE)

    # ---- admission -----------------------------------------------------------------------------------------

    def admit_call(
        self,
        tenant: TenantConfig,
        job_id: str,
        ttl_s: float,
        want: float | None,
        now: float | None = None,
        model: str | None = None,
        share: int | None = None,
    ) -> Call[Admission]:
        """Start a run of `tenant` (its concurrency cap, then its spend caps): the run's budget is at most `want`
        and what the tenant has left in each capped window, less what its other runs in flight reserved and one
        turn of `model`'s runs (RESERVE in claudeq/tenants/_scripts.py). `share`: its share cap (reserve_share), a
        concurrency cap beside `max_concurrency`."""
        now = time.time() if now is None else now
        cap = effective_cap(tenant, share)
        if cap is None and not tenant.capped:
            # Nothing to check (RESERVE would admit it with the spec's budget and no turn): the run is only counted,
            # in one command; the tenant's RELEASE drops expired runs.
            runs, until = self.keys.tenant_runs(tenant.name), now + ttl_s
            return PipeCall(self.redis, lambda p: p.zadd(runs, {job_id: until}), lambda _: Admitted(want))
        at = now
        return tenant_scripts.ReserveArgs(
            members=self.keys.tenant_runs(tenant.name),
            reserved_hash=self.keys.tenant_reserved(tenant.name),
            spend=self.keys.tenant_spend(tenant.name),
            job_id=job_id,
            take="1",
            max="" if cap is None else cap,
            expiry_s=repr(now + ttl_s),
            now_s=repr(now),
            hour_field=hour_field(now),
            day_first_hour=day_start_hour(now),
            cap_hour=_opt(tenant.max_cost_usd_per_hour),
            cap_day=_opt(tenant.max_cost_usd_per_day),
            want=_opt(want),
            share="" if tenant.max_concurrency is None else tenant.max_concurrency,
            turn_field=turn_field(model),
        ).call(self._reserve, lambda reply: _admission(reply, at))

    def admit_account_call(
        self,
        account: AccountConfig,
        job_id: str,
        want: float | None,
        now: float | None = None,
        model: str | None = None,
    ) -> ScriptCall[Admitted | Reserved | OverBudget]:
        """Reserve the budget of a run that holds a slot on `account` (only for an account with spend caps), and one
        turn of `model`'s runs on it beside it: a call the worker sends from its event loop (AccountManager)."""
        at = time.time() if now is None else now

        def parse(reply: Any) -> Admitted | Reserved | OverBudget:
            result = _admission(reply, now=at)
            assert not isinstance(result, AtMax)
            return result

        return tenant_scripts.ReserveArgs(
            members=self.keys.account_slots(account.name),
            reserved_hash=self.keys.account_reserved(account.name),
            spend=self.keys.account_spend(account.name),
            job_id=job_id,
            take="0",
            max="",
            expiry_s="",
            now_s=repr(at),
            hour_field=hour_field(at),
            day_first_hour=day_start_hour(at),
            cap_hour=_opt(account.max_cost_usd_per_hour),
            cap_day=_opt(account.max_cost_usd_per_day),
            want=_opt(want),
            share=account.max_concurrency,
            turn_field=turn_field(model),
        ).call(self._reserve, parse)

    def set_reserved_call(self, tenant: str, job_id: str, budget_usd: float, turn_usd: float = 0.0) -> Call[None]:
        """Lower a run's reservation to the budget it was finally started with (and the turn reserved beside it)."""
        key, value = self.keys.tenant_reserved(tenant), repr(budget_usd + turn_usd)
        return PipeCall(self.redis, lambda p: p.hset(key, job_id, value), done)

    def hold_call(self, tenant: str, job_id: str, ttl_s: float, now: float | None = None) -> Call[None]:
        """Count a job waiting in an account's line among its tenant's runs (until `ttl_s` from now, or its start)."""
        key, until = self.keys.tenant_runs(tenant), (time.time() if now is None else now) + ttl_s
        return PipeCall(self.redis, lambda p: p.zadd(key, {job_id: until}), done)

    def unreserve_call(self, tenant: str, job_id: str) -> Call[None]:
        """Drop what a job that did not start reserved of its tenant's budget (it keeps its place among the runs)."""
        key = self.keys.tenant_reserved(tenant)
        return PipeCall(self.redis, lambda p: p.hdel(key, job_id), done)

    def refresh(self, tenant: str, job_id: str, ttl_s: float, now: float | None = None) -> None:
        """Extend the run's place among the tenant's runs in flight (with the run's heartbeat)."""
        now = time.time() if now is None else now
        self.redis.zadd(self.keys.tenant_runs(tenant), {job_id: now + ttl_s}, xx=True)

    def release_call(
        self, tenant: TenantConfig, job_id: str, now: float | None = None, pop: bool = True, share: int | None = None
    ) -> Call[list[str]]:
        """End a run of the tenant; returns the waiters to promote now, best first (`pop` False: none, for a run
        that never started): one, or as many as it is under its cap (`max_concurrency` and `share`, its share cap
        under reserve_share, which rises when other tenants go idle)."""
        now = time.time() if now is None else now
        runs, reserved = self.keys.tenant_runs(tenant.name), self.keys.tenant_reserved(tenant.name)
        if not pop and tenant.max_concurrency is None and not tenant.capped:
            # An uncapped tenant reserves nothing.
            return PipeCall(self.redis, lambda p: p.zrem(runs, job_id), lambda _: [])
        if not pop:
            return PipeCall(
                self.redis, lambda p: (p.zrem(runs, job_id), p.hdel(reserved, job_id)), lambda _: [], transaction=True
            )
        return tenant_scripts.ReleaseArgs(
            runs=runs,
            reserved=reserved,
            waiters=self.keys.tenant_waiters(tenant.name),
            job_id=job_id,
            job_key_prefix=self.keys.job(""),
            max=_opt_int(effective_cap(tenant, share)),
            now_s=repr(now),
        ).call(self._release, _texts)

    def wait_call(
        self,
        tenant: TenantConfig,
        job_id: str,
        score: float,
        now: float | None = None,
        fallback_s: float | None = None,
        share: int | None = None,
    ) -> ScriptCall[bool]:
        """A deferred job waits for one of its tenant's runs to end; True when one already did (it is due now: under
        its cap, `max_concurrency` and `share`). Otherwise its ready time moves out to `fallback_s` from now (never
        earlier; None: left as it is)."""
        now = time.time() if now is None else now
        return tenant_scripts.WaitArgs(
            runs=self.keys.tenant_runs(tenant.name),
            waiters=self.keys.tenant_waiters(tenant.name),
            deferred=self.keys.deferred,
            job_id=job_id,
            score=repr(score),
            max=effective_cap(tenant, share) or 0,
            now_s=repr(now),
            fallback_s="" if fallback_s is None else repr(now + fallback_s),
        ).call(self._wait, bool)

    def settle_call(self, cost: AttemptCost, now: float | None = None) -> ScriptCall[None] | None:
        """Count a finished attempt's real cost (`AttemptCost`) against its tenant (None: a fleet without a tenants
        file keeps no tenant spend) and account (the hour of `now`), drop the budget its run had reserved, and learn
        what one turn of its model's runs costs where a cap may read it. One SETTLE script
        (claudeq/tenants/_scripts.py); None: nothing to count."""
        parts = self.settle_parts(cost, now)
        return None if parts is None else parts.call(self._settle, lambda _: None)

    def settle_parts(self, cost: AttemptCost, now: float | None = None) -> tenant_scripts.SettleArgs | None:
        """SETTLE's arguments (the `settle` Lua function's: a job's terminal write runs it in its own script); None
        when there is nothing to count or drop."""
        tenant, account, cost_usd, model, reserved = cost.tenant, cost.account, cost.cost_usd, cost.model, cost.reserved
        if cost_usd <= 0 and not reserved:
            return None
        now = time.time() if now is None else now
        spend_pairs = [self.keys.account_spend(account), self.keys.account_reserved(account)]
        if tenant is not None:
            spend_pairs = [self.keys.tenant_spend(tenant), self.keys.tenant_reserved(tenant), *spend_pairs]
        args = tenant_scripts.SettleArgs(
            spend_pairs=spend_pairs,
            job_id=cost.job_id,
            cost=repr(cost_usd),
            hour_field=hour_field(now),
            tenant_turn=turn_field(model),
            account_turn=turn_field(model) if cost.account_capped else "",
            sample=repr(cost_usd / max(1, cost.turns or 1)),
            ttl_s=SPEND_TTL_S,
            drop="1" if reserved else "",
        )
        return args

    def turn_cost(self, kind: Literal["tenant", "account"], name: str, model: str | None = None) -> float | None:
        """What one turn of `model`'s runs costs for a tenant or an account, as learned (None: no run finished)."""
        key = self.keys.tenant_spend(name) if kind == "tenant" else self.keys.account_spend(name)
        value = self.redis.hget(key, turn_field(model))
        return float(text(value)) if value else None

    # ---- fair share ----------------------------------------------------------------------------------------

    def tag_call(self, tenant: TenantConfig, job_id: str) -> ScriptCall[float]:
        """The job's virtual finish tag (issued once, kept in its hash): its place in weighted fair queueing."""
        args = tenant_scripts.TagArgs(
            fair_share=self.keys.fair_share, job=self.keys.job(job_id), tenant=tenant.name, weight=repr(tenant.weight)
        )
        return args.call(self._tag, lambda value: float(text(value)))

    def advance_call(self, tag: float) -> ScriptCall[None]:
        """A job with this tag started: the system virtual time moves up to it."""
        return tenant_scripts.AdvanceArgs(fair_share=self.keys.fair_share, tag=repr(tag)).call(self._advance, done)

    def balance_call(
        self, shares: Mapping[str, int], now: float | None = None, repay_s: float = BALANCE_REPAY_S
    ) -> ScriptCall[dict[str, float]]:
        """Move the active tenants' catch-up balances (slot-seconds: + owed, - owing) on to now; -> them. `shares`: each
        active tenant's share cap, without its balance; `repay_s`: the caller's slot-seconds per slot of catch-up, left
        for readers (BALANCE in claudeq/tenants/_scripts.py)."""
        now = time.time() if now is None else now
        tenant_keys: list[str] = []
        tenants: list[str] = []
        for name, share in shares.items():
            tenant_keys += [self.keys.tenant_runs(name), self.keys.tenant_line(name), self.keys.tenant_waiters(name)]
            tenants += [name, str(share)]
        args = tenant_scripts.BalanceArgs(
            balances=self.keys.tenants_balance,
            tenant_keys=tenant_keys,
            now_s=repr(now),
            bound_s=repr(BALANCE_BOUND_S),
            repay_s=repr(max(BALANCE_REPAY_S, repay_s)),
            tenants=tenants,
        )

        def parse(reply: Any) -> dict[str, float]:
            pairs = [text(item) for item in reply]
            return {pairs[i]: float(pairs[i + 1]) for i in range(0, len(pairs), 2)}

        return args.call(self._balance, parse)

    def balances(self) -> dict[str, float]:
        """The catch-up balances as last moved (a read only: `claudeq tenants`, the exporter)."""
        return self._balances()[0]

    def _balances(self) -> tuple[dict[str, float], float]:
        """(the balances as last moved, the repay_s the worker that moved them last used)."""
        out: dict[str, float] = {}
        repay_s = BALANCE_REPAY_S
        for raw, value in self.redis.hgetall(self.keys.tenants_balance).items():
            name = text(raw)
            try:
                if name == REPAY_FIELD:
                    repay_s = float(text(value))
                else:
                    out[name] = float(text(value).split("|", 1)[0])
            except ValueError:
                continue
        return out, repay_s

    def _share_cap(
        self, tenant: TenantConfig, active: set[str], slots: int, balances: Mapping[str, float], repay_s: float
    ) -> int | None:
        share = self.tenants.share_cap(tenant, active, slots)
        return None if share is None else caught_up(share, balances.get(tenant.name, 0.0), repay_s)

    # ---- the active-job index (waiting counts) -------------------------------------------------------------

    def unindex_call(self, tenant: str, job_id: str) -> PipeCall[None]:
        """Remove a finished (or cancelled) job of `tenant` (the name it gives) from the active-job index. The
        producer indexed it under the entry governing it in the producer's own view, which need not be this
        process's (a producer without the tenants file files every job under `default`): so every name it can
        have been filed under — its own, the one governing it here, `default` — loses it. So does the tenant's line
        (a job that ended while waiting in it, e.g. cancelled)."""
        indexes, last = self.unindex_keys(tenant)

        def queue(pipe: Any) -> None:
            for key in indexes:
                pipe.zrem(key, job_id)
            if last is not None:
                pipe.hset(self.keys.tenants_done, last, repr(time.time()))

        return PipeCall(self.redis, queue, done)

    def unindex_keys(self, tenant: str) -> tuple[list[str], str | None]:
        """The sorted sets a finished job of `tenant` leaves, and the tenant whose last job's end is recorded (with
        reserve_share: the idle grace counts from it)."""
        governing = self.tenants.governing(tenant).name
        keys = [self.keys.tenant_jobs(name) for name in dict.fromkeys((tenant, governing, DEFAULT_TENANT))]
        if self.tenants.configured:
            keys.append(self.keys.tenant_line(governing))
        return keys, governing if self.tenants.reserve_share else None

    def active_call(self, now: float | None = None) -> PipeCall[set[str]]:
        """The tenants active for reserved fair share: with jobs not finished (their active-job index exists), or
        whose last job finished less than `share_idle_s` ago. One pipeline."""
        now = time.time() if now is None else now
        names = self.tenants.share_names

        def queue(pipe: Any) -> None:
            for name in names:
                pipe.exists(self.keys.tenant_jobs(name))
            pipe.hgetall(self.keys.tenants_done)

        def parse(replies: list[Any]) -> set[str]:
            *indexed, done = replies
            active = {name for name, n in zip(names, indexed, strict=True) if n}
            grace = self.tenants.share_idle_s
            for name, at in done.items():
                try:
                    if now - float(text(at)) < grace:
                        active.add(text(name))
                except ValueError:
                    continue
            return active & set(names)

        return PipeCall(self.redis, queue, parse)

    # ---- reads ---------------------------------------------------------------------------------------------

    def spend(self, kind: Literal["tenant", "account"], name: str, now: float | None = None) -> tuple[float, float]:
        """(hour, day) dollars spent by a tenant's or an account's runs in the current calendar windows."""
        now = time.time() if now is None else now
        pipe = self.redis.pipeline(transaction=False)
        for key in self._spend_keys(kind, name):
            pipe.hmget(key, day_hour_fields(now))
        return _summed(pipe.execute(), now)

    def _spend_keys(self, kind: Literal["tenant", "account"], name: str) -> list[str]:
        """The spend hashes whose sum is a tenant's or an account's spend: `default`'s, without a tenants file, is
        its accounts' (see `accounts`)."""
        if kind == "account":
            return [self.keys.account_spend(name)]
        if name == DEFAULT_TENANT and not self.tenants.configured and self.accounts:
            return [self.keys.account_spend(account) for account in self.accounts]
        return [self.keys.tenant_spend(name)]

    def usage(self, now: float | None = None, slots: int | None = None) -> list[TenantUsage]:
        """Every configured tenant (or `default` when none is): runs in flight, jobs waiting, spend vs caps, and
        with `reserve_share` and the fleet's `slots` given, each one's share cap now. Without a tenants file,
        `default`'s runs and jobs are every job's: read from the status indexes' sizes (running; queued + deferred),
        not from per-tenant indexes."""
        now = time.time() if now is None else now
        sharing = (
            run_call(self.active_call(now))
            if self.tenants.configured and self.tenants.reserve_share and slots
            else None
        )
        balances, repay_s = self._balances() if sharing is not None else ({}, BALANCE_REPAY_S)
        tenants = self.tenants.tenants or [self.tenants.governing("default")]
        pipe = self.redis.pipeline(transaction=False)
        for tenant in tenants:
            if self.tenants.configured:
                pipe.zcount(self.keys.tenant_runs(tenant.name), f"({now}", "+inf")
                pipe.zcard(self.keys.tenant_jobs(tenant.name))
            else:
                pipe.zcard(self.keys.running)
                pipe.zcard(self.keys.queued)
                pipe.zcard(self.keys.deferred)
            spend_keys = self._spend_keys("tenant", tenant.name)
            for key in spend_keys:
                pipe.hmget(key, day_hour_fields(now))
        replies = pipe.execute()
        if not self.tenants.configured:
            running, queued, deferred = (int(n) for n in replies[:3])
            replies = [running, running + queued + deferred, _summed(replies[3:], now)]
        else:
            replies = [reply if i % 3 < 2 else _summed([reply], now) for i, reply in enumerate(replies)]
        out = []
        for i, tenant in enumerate(tenants):
            in_flight, active, (hour, day) = replies[3 * i : 3 * i + 3]
            out.append(
                TenantUsage(
                    name=tenant.name,
                    in_flight=int(in_flight),
                    waiting=max(0, int(active) - int(in_flight)),
                    max_concurrency=tenant.max_concurrency,
                    weight=tenant.weight,
                    on_budget=tenant.on_budget,
                    share_cap=None
                    if sharing is None
                    else self._share_cap(tenant, sharing, slots or 0, balances, repay_s),
                    balance=balances.get(tenant.name) if sharing is not None else None,
                    spend=Spend(
                        hour=hour,
                        day=day,
                        cap_hour=tenant.max_cost_usd_per_hour,
                        cap_day=tenant.max_cost_usd_per_day,
                    ),
                )
            )
        return out


def _summed(replies: Sequence[Sequence[Any]], now: float) -> tuple[float, float]:
    """(hour, day) summed over replies of spend hashes to an HMGET of `day_hour_fields(now)` (absent fields: nothing
    spent): the current hour's, and the day's 24."""
    current = int(now // HOUR_S) - day_start_hour(now)
    hour = day = 0.0
    for reply in replies:
        values = [float(text(value)) if value else 0.0 for value in reply]
        hour += values[current]
        day += sum(values)
    return hour, day


def _texts(reply: Any) -> list[str]:
    return [text(item) for item in reply]


def _opt_int(value: int | None) -> str | int:
    return "" if value is None else value


def _admission(reply: list[object], now: float) -> Admission:
    code, value = int(text(reply[0])), text(reply[1])
    if code == Reserve.ADMITTED:
        turn = text(reply[2]) if len(reply) > 2 else ""
        return Admitted(float(value) if value else None, float(turn) if turn else 0.0)
    if code == Reserve.AT_MAX:
        return AtMax()
    window: Window = "day" if value == "day" else "hour"
    if code == Reserve.RESERVED:
        return Reserved(window)
    return OverBudget(window, window_end(window, now))
