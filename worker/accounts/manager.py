"""AccountManager: leases account slots for runs; its parts admit a tenant's runs and turn signals into state.

What the engine calls (a run's `acquire`, `release`; the waiting lines' `add_waiter`, `admit`, `fair_key`) is a
coroutine for the engine loop: the stores' calls it makes (`AccountStore` / `TenantStore` `*_call`: a script call or
a pipeline, claudeq/script_calls.py) go on the loop's async client (`use_async`). A tenant's admission of a run and
the spend it settles (`settle`, `job_done`, `add_tenant_waiter`) are coroutines of `AccountManager.admission`
(worker/accounts/admission.py), sent through the manager's sender. The rate-limit and auth signals (`observe`,
`record_response`, `cool`, `disable`) are plain calls on `AccountManager.signals` (worker/accounts/signals.py): the
pass-through's threads make them as responses pass (the handler, on a Redis thread).
State lives in Redis, so a cooldown one worker writes is seen by every worker at its next acquire; the choice itself
is the pure `claudeq.worker.accounts.choice.choose`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
import redis.asyncio

from claudeq.accounts import AccountStore, Waiter, model_family
from claudeq.keys import Keys, text
from claudeq.lua.results import Slot
from claudeq.models import AccountState, Attempt, JobSpec, Usage
from claudeq.permissions import spec_models
from claudeq.script_calls import AsyncCalls
from claudeq.tenants import OverBudget, Reserved, TenantStore

from ...config.account_pool import AccountConfig, AccountPool
from ...config.settings import Settings
from ...config.tenants import TenantConfig
from ..passthrough.prefixes import Breakpoint
from ..store.job_store import START_LOST, AttemptStart, SlotRelease
from .admission import TenantAdmission, over_budget
from .cache_affinity import CacheStore, digest_text, prefix_key
from .choice import NO_PREFERENCE, AccountView, CachePreference, JobNeeds, NoAccount, choose, eligible, reason_for
from .signals import AccountSignals
from .waiting_line import PRIORITY_SPAN, tenant_rank

__all__ = ["AccountManager", "NoAccount", "SlotLease"]

log = logging.getLogger("claudeq.accounts")

#: How often acquire re-reads state after losing every slot race before it reports NoAccount.
_ACQUIRE_ROUNDS = 3
#: An acquire may first choose from the accounts' states another acquire of this process read at most this long ago
#: (s): the ACQUIRE script re-checks everything atomically, so a reused read only orders the candidates, and nothing
#: is decided from it without a fresh read (no account, or every answer a wait). Reading every account's state and
#: live slots costs two commands per account, O(runs in flight) for the slots.
_VIEW_REUSE_S = 0.25


@dataclass(frozen=True)
class SlotLease:
    """A slot held on one account for one job; refresh it with the run's heartbeat, release it when done."""

    account: AccountConfig
    job_id: str
    tenant: str | None = None  # the tenant whose run this is (None: a lease taken outside tenant admission)
    budget_usd: float | None = None  # the most the run may spend (None: no cap applies)
    model: str | None = None  # the spec's model: what one turn costs is learned per model
    taken: float = field(default_factory=time.monotonic)  # when this worker took it (its run's length, at release)
    started: Attempt | None = None  # the attempt whose start was written with the slot, in the same script (`start`)
    reason: str | None = None  # why this account: `warm cache` (its prompt cache holds the job's prefix) / `least used`
    prefix_key: str | None = None  # the job's prefix key when cache affinity is on (the pass-through files under it)


@dataclass(frozen=True)
class SlotAsk:
    """One acquire's ask for a slot, as `_take_slot` and its parts read it: the job (its spec, and what the choice
    rule reads of it), the tenant whose run it is and the most the run may spend, then what `acquire` was given —
    the accounts not to take this time, the job's place in the waiting line, the accounts it may already hold a slot
    on, the attempt to start with the slot — its cache preference, and what the lease says beyond the account: its
    tenant (`lease_tenant`; None for a run admitted as no tenant's) and its prefix key. Built once per acquire; the
    lease is built once, with all of it, when a slot is taken (`_take`)."""

    job_id: str
    spec: JobSpec
    needs: JobNeeds  # JobNeeds.of(spec)
    tenant: TenantConfig
    want: float | None  # the run's budget: the spec's, or what the tenant's admission left it
    exclude: frozenset[str] = frozenset()
    rank: float | None = None
    holds: Collection[str] | None = None
    start: AttemptStart | None = None
    cache: CachePreference = NO_PREFERENCE
    lease_tenant: str | None = None
    prefix_key: str | None = None


@dataclass
class _Tries:
    """What one `_take_slot` has learned so far: the accounts where the job already holds a slot, those whose spend
    cap (`over`) or runs' reservations (`reserved`) gave a slot back, and the last round's race: the accounts chosen,
    the views they were chosen from, those that put the job in line or are ramping their starts up, how many raced."""

    held_by: list[str] = field(default_factory=list)
    over: dict[str, OverBudget] = field(default_factory=dict)
    reserved: set[str] = field(default_factory=set)
    chosen: list[str] = field(default_factory=list)
    views: list[AccountView] = field(default_factory=list)
    in_line: list[str] = field(default_factory=list)
    ramping: list[str] = field(default_factory=list)
    raced: int = 0

    def given_back(self) -> set[str]:
        """The accounts that gave a slot back: not chosen again in this acquire."""
        return set(self.over) | self.reserved


class StartLost(Exception):
    """START took the slot, but the run's fence no longer holds the job: another worker owns it now."""


@dataclass(frozen=True)
class Spent:
    """An attempt's cost not counted yet (TenantAdmission.settle): the job's terminal write counts it in its own
    script when it can (`slot_release`)."""

    lease: SlotLease
    cost_usd: float
    turns: int | None = None


class AccountManager(AsyncCalls):
    """The worker's view of the account pool: slots, choice and state changes."""

    def __init__(self, settings: Settings, redis: redis.Redis, keys: Keys, pool: AccountPool | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.pool = pool if pool is not None else settings.accounts
        self.store = AccountStore(
            redis, keys, self.pool, predictive=settings.predictive_admission, jitter_s=settings.ramp_jitter_s
        )
        self.cache = CacheStore(redis, keys)
        self.tenants = settings.tenants
        self.tenant_store = TenantStore(redis, keys, self.tenants, accounts=[a.name for a in self.pool.accounts])
        if self.tenants.configured:
            # Producers without the tenants file index their jobs (under `default`) only in a fleet that uses them.
            redis.set(keys.tenants_in_use, "1")
        #: The accounts' health signals (rate limits, cooldowns, disabling) and their state read back.
        self.signals = AccountSignals(settings, self.pool, self.store)
        #: The tenants' admission of runs, their share of the fleet's slots and their spend.
        slots = sum(a.max_concurrency for a in self.pool.accounts)
        self.admission = TenantAdmission(settings, self.tenant_store, slots, self.send)
        self._snapshot: tuple[float, list[tuple[AccountState, datetime | None]]] | None = None  # (read at, states)
        #: The snapshot read in flight on the engine loop: the acquires that find the last one too old meanwhile
        #: share it instead of each reading its own (a burst of claims once read the accounts ~10 times a second).
        self._snapshot_read: asyncio.Future[list[tuple[AccountState, datetime | None]]] | None = None
        #: The chooser's views of the last snapshot read (`_views`): (its states, the accounts allowed, the views).
        #: Every acquire that shares a read sees the same views; they are built once per read and allowed accounts.
        self._last_views: tuple[object, object, list[AccountView]] | None = None
        #: Token counts of attempts that ended in this turn of the engine loop, by account (`count_tokens`), and the
        #: send that takes them.
        self._tokens: dict[str, dict[str, int]] = {}
        self._tokens_sent: asyncio.Future[None] | None = None
        #: The system-prefix reads in flight on the engine loop, by prefix key (`_system_prefix`).
        self._prefix_reads: dict[str, asyncio.Future[str | None]] = {}

    # ---- slots -----------------------------------------------------------------------------------------------

    async def acquire(
        self,
        job_id: str,
        spec: JobSpec,
        exclude: frozenset[str] = frozenset(),
        rank: float | None = None,
        holds: Collection[str] | None = None,
        start: AttemptStart | None = None,
        warm_wait_until: datetime | None = None,
    ) -> SlotLease | NoAccount:
        """Admit a run of the job's tenant (runs in flight, spend caps), then lease a slot on the best eligible
        account the tenant may use, or say when to look again (NoAccount). The lease carries the run's budget: at
        most the spec's `max_budget_usd` and what the tenant and the account have left in their capped windows.

        `rank` is the job's place in the waiting line (claudeq.worker.accounts.waiting_line): a free slot that
        better-ranked waiters are due for is theirs, and the job waits in line too (None: take any free slot).

        `holds`: the only accounts (names, or slots keys) on which the job may already hold a slot — the one the
        waiting line handed it, the ones its attempts ran on (None: look at every account).

        `start` (no tenants file): the slot of an account without a spend cap is taken with the attempt's start
        written in the same script (the lease says `started`); StartLost when the fence no longer held the job.

        `warm_wait_until`: until then the job waits for an account whose prompt cache holds its prefix rather than
        take a cold one (docs/architecture.md#cache-affinity).
        """
        tenant = self.tenants.governing(spec.tenant)
        key, warm = await self._warm(spec)
        cache = CachePreference(warm, self.settings.cache_affinity_max_skew, warm_wait_until if warm else None)
        if not self.tenants.configured:
            # No tenants file: nothing caps a tenant, so no run is counted per tenant (`claudeq tenants` shows
            # `default` from the status counters); its spend is still tallied under `default` when the run settles.
            needs = JobNeeds.of(spec)
            want = spec.max_budget_usd
            return await self._take_slot(
                SlotAsk(job_id, spec, needs, tenant, want, exclude, rank, holds, start, cache, None, key)
            )
        admission = await self.admission.admit_run(tenant, job_id, spec.max_budget_usd, spec.model)
        if isinstance(admission, NoAccount):
            # A slot the waiting line handed it goes back (the promoter's next pass hands it on).
            await self._drop_slots(job_id)
            return admission
        admitted, cap = admission
        # `start` is for runs without a tenants file (see above): a tenant's run starts apart.
        want = admitted.budget_usd
        ask = SlotAsk(
            job_id, spec, JobNeeds.of(spec), tenant, want, exclude, rank, holds, None, cache, tenant.name, key
        )
        lease = await self._take_slot(ask)
        await self.admission.admitted(tenant, job_id, admitted, cap, lease, rank)
        return lease

    async def _warm(self, spec: JobSpec) -> tuple[str | None, dict[str, float]]:
        """The job's prefix key and the accounts whose cache holds its system prefix now (docs/architecture.md
        #cache-affinity); (None, {}) with CLAUDEQ_CACHE_AFFINITY=false."""
        if not self.settings.cache_affinity:
            return None, {}
        # Only a job with a cwd reads files (its CLAUDE.md): the others' key is computed here, without a thread hop.
        key = await asyncio.to_thread(prefix_key, spec, self.settings) if spec.cwd else prefix_key(spec, self.settings)
        digest = await self._system_prefix(key)
        if digest is None:
            return key, {}
        names = self.pool.names
        replies = await self._pipe(self.cache.warm_call(digest, names))
        return key, self.cache.warm_until(replies, names, time.time())

    async def _system_prefix(self, key: str) -> str | None:
        """The digest the key's last run cached as its system prefix. The acquires that ask for the same key while
        its read is in flight share that read (a burst of claims of alike jobs once read it once each)."""
        read = self._prefix_reads.get(key)
        if read is None:
            read = self._prefix_reads[key] = asyncio.ensure_future(self._read_system_prefix(key))
        return await asyncio.shield(read)

    async def _read_system_prefix(self, key: str) -> str | None:
        try:
            [reply] = await self._pipe(self.cache.system_prefix_call(key))
        finally:
            self._prefix_reads.pop(key, None)
        return digest_text(reply)

    def record_prefixes(self, account: str, key: str | None, found: list[Breakpoint], now: float) -> None:
        """File the prompt prefixes one request cached on `account` (the pass-through's recorder thread)."""
        if self.pool.get(account) is not None:
            self.cache.record(account, key, found, now)

    async def fair_key(self, job_id: str, spec: JobSpec) -> float | None:
        """The job's key in the waiting line with tenants configured: its virtual finish tag (weighted fair queueing
        over tenants; issued once per job). None without a tenants file: the creation time orders."""
        if not self.tenants.configured:
            return None
        return await self.send(self.tenant_store.tag_call(self.tenants.governing(spec.tenant), job_id))

    async def _held_by(self, job_id: str, among: Collection[str] | None = None) -> list[str]:
        """`AccountStore.held_by_call` from the loop: the accounts on which `job_id` holds a live slot."""
        return await self.send(self.store.held_by_call(job_id, among=among))

    async def _drop_slots(self, job_id: str) -> None:
        slots = [self.store.keys.account_slots(name) for name in await self._held_by(job_id)]
        if slots:
            await self._pipe(lambda p: [p.zrem(key, job_id) for key in slots])

    async def _take_slot(self, ask: SlotAsk) -> SlotLease | NoAccount:
        """Lease a slot on the best eligible account (preferring a warm one), or say when one may free: first a slot
        the job may already hold (`_take_held`), then rounds of choosing from the accounts' snapshot and racing for
        the chosen accounts' slots (`_race`); else why it got none (`_refused`, `_not_taken`)."""
        tries = _Tries()
        if ask.holds is None or ask.holds:
            tries.held_by = await self._held_by(ask.job_id, among=ask.holds)
        held = await self._take_held(ask, tries)
        if held is not None:
            return held
        rounds, reuse = 0, True
        while rounds < _ACQUIRE_ROUNDS:
            now = time.time()
            reused = self._snapshot_reusable(now, reuse)
            if not reused:
                self._snapshot = (now, await self._read_snapshot(now))
            tries.views = self._views(ask.tenant.accounts)
            rounds, reuse = rounds + (0 if reused else 1), False
            decision = choose(
                tries.views, ask.needs, now=_dt(now), exclude=ask.exclude | tries.given_back(), cache=ask.cache
            )
            if isinstance(decision, NoAccount):
                if reused:
                    continue  # read again before saying no
                return self._refused(ask, tries, decision, now)
            lease = await self._race(ask, tries, decision, now)
            if lease is not None:
                return lease
            if len(tries.in_line) + len(tries.ramping) == tries.raced and not reused:
                break  # no use racing again: every free slot is spoken for, or starts are being paced
        return self._not_taken(ask, tries)

    async def _take_held(self, ask: SlotAsk, tries: _Tries) -> SlotLease | None:
        """The slot the job already holds, if any, back (refreshed) rather than a second one."""
        for name in tries.held_by:
            # A redelivered or repeated acquire gets the slot it already holds back (refreshed), not a second; so
            # does a waiter a release handed a slot to (unless its family was held back on that account meanwhile).
            # Only where a slot can be is looked at (`holds`): a worker that died in the instant between taking a
            # slot and writing the attempt leaves that slot to expire (one lease TTL: capacity, never an excess).
            if name in ask.exclude:
                continue
            got = await self._take(ask, tries, self.store.config(name), None, None, True)
            if isinstance(got, SlotLease):
                return got
        return None

    async def _race(self, ask: SlotAsk, tries: _Tries, decision: list[AccountConfig], now: float) -> SlotLease | None:
        """Try for a slot on the chosen accounts, best first: the lease of the first one taken, or None (`tries`
        then says which accounts put the job in line and which are ramping their starts up)."""
        tries.chosen = [a.name for a in decision]
        tries.in_line, tries.ramping = [], []
        candidates = decision
        wait_until = ask.cache.wait_until
        if wait_until is not None and wait_until.timestamp() > now and decision[0].name in ask.cache.warm:
            # It may wait for a warm account: one lost to a race (a stale view) is read again, not passed over
            # for a cold one (the next round's choice then says whether to wait for it).
            candidates = [a for a in decision if a.name in ask.cache.warm]
        tries.raced = len(candidates)
        for account in candidates:
            # The script re-checks state and capacity atomically: another worker may have taken the last slot
            # or cooled the account since the snapshot. Where the job may hold a slot was looked at above (a
            # running job is handed none meanwhile: `admit` hands slots to deferred jobs only).
            got = await self._take(ask, tries, account, now, ask.rank, account.name in tries.held_by)
            if isinstance(got, SlotLease):
                return got
            if got in (Slot.IN_LINE, Slot.RESERVED):
                tries.in_line.append(account.name)
            elif got == Slot.RAMPING:
                tries.ramping.append(account.name)
        return None

    async def _take(
        self, ask: SlotAsk, tries: _Tries, account: AccountConfig, now: float | None, rank: float | None, may_hold: bool
    ) -> SlotLease | int:
        """Try for a slot on `account`, with the attempt's start in the same script when it can: the lease, or the
        script's answer (`Slot`) when there is none — `Slot.ACQUIRED` when the account's spend cap or the
        reservations of its runs in flight gave the slot back at once (`tries` notes which)."""
        attempt = _starting(ask.start, account, ask.want)
        got = await self._try_acquire(ask, account.name, now, rank, may_hold, attempt)
        if got == START_LOST:
            raise StartLost(ask.job_id)
        if got != Slot.ACQUIRED:
            return got
        lease = await self._budgeted(ask, account, attempt)
        if isinstance(lease, OverBudget):
            tries.over[account.name] = lease
        elif isinstance(lease, Reserved):
            tries.reserved.add(account.name)
        else:
            return lease
        return got

    def _refused(self, ask: SlotAsk, tries: _Tries, decision: NoAccount, now: float) -> NoAccount:
        """What to say when a fresh read leaves no account to take the job: the choice's answer, unless an account
        gave a slot back for its reservations (they end with its runs) or its spend cap."""
        if tries.reserved and not decision.permanent:
            # A run in flight on it ends and frees its reservation (its release promotes a waiter).
            reason = f"what account(s) {', '.join(tries.reserved)} have left is reserved by their runs in flight"
            return NoAccount(_dt(now + self.settings.lease_ttl_s), reason, sorted(tries.reserved))
        if tries.over and not decision.permanent:
            first = min(tries.over.items(), key=lambda item: item[1].until)
            return over_budget(f"account {first[0]!r}", ask.tenant, first[1])
        return decision

    def _not_taken(self, ask: SlotAsk, tries: _Tries) -> NoAccount:
        """When to look again after the rounds took no slot, and in which accounts' lines the job waits."""
        names = tries.chosen
        in_line, ramping = tries.in_line, tries.ramping
        if ramping and not in_line and ask.rank is None:
            # Just out of a cooldown or a reservation: starts are paced; the next one is due within a second or so.
            # (A job without a rank cannot wait in line: it waits in place.)
            soon = _dt(time.time() + 1.0 / max(0.1, min(self.store.config(n).ramp_starts_per_s for n in ramping)))
            return NoAccount(soon, f"starts on {', '.join(ramping)} are ramping up after a reset", names, cooldown=True)
        if in_line or ramping:
            # Our turn comes through the waiting line: a release or the promoter's pass hands us a slot. We wait in
            # the line of every account that may run the job, not only the ones that yielded, so a slot freeing on
            # an account that was full a moment ago is handed to us too. Joining the line moves the ready time out
            # to the fallback (`waiter_fallback_s`); this one counts should the worker die before the job joins.
            # The paced starts of a ramp after a reset are handed out from the line too, so they go by rank (a job
            # waiting in place for one would be in no line and take it only by asking first).
            skip = set(in_line) | set(ramping) | ask.exclude | tries.given_back()
            named = in_line + ramping
            lines = named + [n for n in eligible(tries.views, ask.needs) if n not in skip]
            later = _dt(time.time() + self.settings.lease_ttl_s)
            why = (
                f"waiting in line behind better-ranked jobs on {', '.join(in_line)}"
                if in_line
                else f"waiting in line while starts on {', '.join(ramping)} ramp up after a reset"
            )
            return NoAccount(later, why, lines)
        soon = _dt(time.time() + min(1.0, self.settings.loop_interval_s))
        return NoAccount(soon, "lost every race for a free slot; try again shortly", names)

    async def _read_snapshot(self, now: float) -> list[tuple[AccountState, datetime | None]]:
        """The accounts' snapshot on the engine loop (one pipeline on its client): one read at a time, shared by every
        acquire that wants one while it is in flight. Its answer is at most that read's round trip older than `now`,
        well within _VIEW_REUSE_S; ACQUIRE re-checks the account atomically anyway."""
        reading = self._snapshot_read
        if reading is None or reading.done() or reading.get_loop() is not asyncio.get_running_loop():
            reading = asyncio.ensure_future(self._snapshot_now(now))
            self._snapshot_read = reading
        return await asyncio.shield(reading)

    async def _snapshot_now(self, now: float) -> list[tuple[AccountState, datetime | None]]:
        return await self.send(self.store.snapshot_call(now))

    async def _try_acquire(
        self, ask: SlotAsk, name: str, now: float | None, rank: float | None, may_hold: bool, attempt: Attempt | None
    ) -> int:
        """ACQUIRE on account `name` (AccountStore.acquire_call), with `attempt`'s start written in the same script
        when the ask starts one (`AttemptStart.call`): the script's answer (`Slot`, or START_LOST)."""
        call = self.store.acquire_call(
            name, ask.job_id, self.settings.lease_ttl_s, now, rank, ask.needs.family, may_hold
        )
        return await self.send(call if ask.start is None or attempt is None else ask.start.call(call, attempt))

    async def _budgeted(
        self, ask: SlotAsk, account: AccountConfig, started: Attempt | None
    ) -> SlotLease | Reserved | OverBudget:
        """The lease of a slot just taken on `account` (`started`: the attempt its script started), with the run's
        budget (no call at all for an account without a spend cap); an account over its spend cap (or whose budget
        left is reserved by its runs in flight) gives the slot back at once (no waiter was denied it: it was free)."""
        job_id, want, model = ask.job_id, ask.want, ask.spec.model
        if account.capped:
            reserved = await self.send(self.tenant_store.admit_account_call(account, job_id, want, model=model))
            if isinstance(reserved, OverBudget | Reserved):
                slots = self.store.keys.account_slots(account.name)
                await self._pipe(lambda p: p.zrem(slots, job_id))
                return reserved
            want = reserved.budget_usd
        # Why this account, and under which prefix key its requests are filed (docs/architecture.md#cache-affinity).
        reason = reason_for(account.name, ask.cache.warm)
        return SlotLease(
            account, job_id, ask.lease_tenant, want, model, started=started, reason=reason, prefix_key=ask.prefix_key
        )

    def refresh(self, lease: SlotLease, ttl_s: float) -> None:
        """Extend the slot's expiry and the run's place among its tenant's runs (called with the run's heartbeat)."""
        if lease.tenant is not None:
            self.tenant_store.refresh(lease.tenant, lease.job_id, ttl_s)
        if not self.store.refresh(lease.account.name, lease.job_id, ttl_s):
            # Expired and dropped (a long pause): the run goes on, but the slot may have been handed out again.
            log.warning("slot of job %s on account %s had expired before refresh", lease.job_id, lease.account.name)

    def expiring_keys(self, lease: SlotLease) -> list[str]:
        """The sorted sets holding the run with an expiry, the ones `refresh` moves it in: its account slot, then its
        tenant's runs (when the run was admitted as a tenant's). The engine's lease heartbeat moves them in its own
        script (WorkerJobStore.beat_call) rather than through `refresh`."""
        keys = [self.store.keys.account_slots(lease.account.name)]
        if lease.tenant is not None:
            keys.append(self.store.keys.tenant_runs(lease.tenant))
        return keys

    async def release(self, lease: SlotLease) -> list[str]:
        """Free the slot and the tenant's run; returns the jobs to wake: the account's waiter the slot was handed to
        (already `queued`, holding it) and the tenant's waiter popped (still `deferred`, to promote). A run admitted
        as no tenant's (no tenants file) frees its slot in one call on the async client; a tenant's run first reads
        and moves the tenant's state (a few calls more, on the same client)."""
        woken = [] if lease.tenant is None else await self._release_tenant_run(lease, lease.tenant)
        call = self.store.release_call(lease.account.name, lease.job_id, self.settings.lease_ttl_s)
        return list(dict.fromkeys(await self.send(call) + woken))

    async def _release_tenant_run(self, lease: SlotLease, tenant_name: str) -> list[str]:
        """The tenant's side of a release: its run ends, and its waiter popped joins this account's line."""
        woken: list[str] = []
        tenant = self.tenants.governing(tenant_name)
        popped = await self.admission.end_run(lease, tenant)
        for i, waiter in enumerate(popped):
            # The tenant's waiter joins this account's line at its own rank, holding its place among its
            # tenant's runs, before the slot is handed out: the slot goes to it when it ranks first (its
            # tenant's turn), not to whoever waits in line while its message makes the round trip through the
            # broker. A job this account may not run is promoted as before, and so are the waiters popped
            # beyond the first (its cap rose: a share cap as other tenants went idle), whose slots may be free
            # on any account.
            admitted = await self._line_up(lease.account, tenant, waiter) if i == 0 else None
            woken += [waiter] if admitted is None else admitted
        return woken

    def slot_release(
        self, lease: SlotLease, tenant: str, *, indexed: bool = True, spent: Spent | None = None
    ) -> SlotRelease | None:
        """What the job's terminal write can free in its own script (WorkerJobStore.finish_call): the slot of a run
        admitted as no tenant's (no tenants file), the job's entries in the active-job index (`tenant`: the name its
        spec gives; `indexed` False: its producer put it in none) and what its last attempt spent (`spent`: counted
        with the write, as `settle` would). None for a tenant's run: its release reads and moves the tenant's state
        (`release`, `job_done`)."""
        if lease.tenant is not None or self.tenants.configured:
            return None
        unindex, done = self.tenant_store.unindex_keys(tenant)
        if done is not None:
            return None
        handout = self.store.handout(lease.account.name, self.settings.lease_ttl_s, None)
        settle = None if spent is None else self.admission.settle_parts(spent.lease, spent.cost_usd, spent.turns)
        return SlotRelease(handout, unindex if indexed else [], settle)

    async def _line_up(self, account: AccountConfig, tenant: TenantConfig, job_id: str) -> list[str] | None:
        """Put a deferred job of `tenant` in `account`'s line at its rank, among the tenant's runs, when the account
        may run it; returns the jobs the line admitted at once (see add_waiter), None when it did not join."""
        key = self.store.keys.job(job_id)
        ((spec_json, tag, created),) = await self._pipe(lambda p: p.hmget(key, ["spec", "vtag", "created_at"]))
        if not spec_json or not tag or not created:
            return None
        try:
            spec = JobSpec.model_validate_json(spec_json)
            created_s = datetime.fromisoformat(text(created)).timestamp()
        except ValueError:
            return None
        if spec.account not in (None, account.name) or not all(account.allows_model(m) for _, m in spec_models(spec)):
            return None
        if tenant.accounts is not None and account.name not in tenant.accounts:
            return None
        await self.send(self.tenant_store.hold_call(tenant.name, job_id, self.settings.lease_ttl_s))
        rank = min(max(float(tag), 0.0), PRIORITY_SPAN - 1.0)
        return await self.add_waiter(
            [account.name], job_id, rank, spec.model, (spec.tenant, tenant_rank(spec.priority, created_s))
        )

    async def count_tokens(self, account: str, usage: Usage) -> None:
        """Add an attempt's input-side tokens to the account's counters: `claudeq accounts` shows the share read
        from the prompt cache (docs/architecture.md#cache-affinity)."""
        counts = {
            "input_tokens": usage.input_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_creation_tokens,
        }
        if self.pool.get(account) is None or not any(counts.values()):
            return
        # The counts of every attempt that ends in this turn of the loop go in together: one HINCRBY per account and
        # counter, however many runs ended on it (a fleet's runs end in bursts). Each caller returns once they are
        # stored, as alone.
        pending = self._tokens.setdefault(account, {})
        for name, count in counts.items():
            pending[name] = pending.get(name, 0) + count
        if self._tokens_sent is None:
            self._tokens_sent = asyncio.ensure_future(self._send_tokens())
        await asyncio.shield(self._tokens_sent)

    async def _send_tokens(self) -> None:
        """Send the token counts gathered in this turn of the loop (`count_tokens`), in one round trip."""
        await asyncio.sleep(0)  # the turn's other attempts add theirs
        counts, self._tokens, self._tokens_sent = self._tokens, {}, None
        keys = self.store.keys

        def queue(p: Any) -> None:
            for account, by_name in counts.items():
                for name, count in by_name.items():
                    p.hincrby(keys.account(account), f"n:{name}", count)

        await self._pipe(queue)

    async def add_waiter(
        self,
        accounts: list[str],
        job_id: str,
        rank: float,
        model: str | None = None,
        tenant: tuple[str, float] | None = None,
    ) -> list[str]:
        """A deferred job (of `model`) waits in line for a slot on these accounts (its ready time becomes the fallback,
        `waiter_fallback_s` away); returns the jobs admitted into a free slot right away (already `queued`, holding
        it; maybe this very job): send their messages. `tenant`: (its tenant, its place among the tenant's jobs,
        `waiting_line.tenant_rank`): with a tenants file it joins its tenant's line at that place too, so a slot that
        goes to its tenant goes to the tenant's best job."""
        names = [a for a in accounts if self.pool.get(a) is not None]
        line = None
        if tenant is not None and self.tenants.configured:
            line = (self.store.keys.tenant_line(self.tenants.governing(tenant[0]).name), tenant[1])
        call = self.store.add_waiter_call(
            names,
            Waiter(job_id, rank, model_family(model), line),
            self.settings.lease_ttl_s,
            fallback_s=self.settings.waiter_fallback_s,
        )
        admitted = [] if call is None else await self.send(call)
        if job_id in admitted:
            log.info("job %s: a slot was free when it joined the line; it is due now", job_id)
        return admitted

    async def admit(self) -> list[str]:
        """Hand every account's free slots to its best waiters (the promoter's pass); returns the jobs admitted."""
        calls = [self.store.admit_call(account.name, self.settings.lease_ttl_s) for account in self.pool.accounts]
        return [job_id for admitted in await asyncio.gather(*map(self.send, calls)) for job_id in admitted]

    # ---- internals -------------------------------------------------------------------------------------------

    def _snapshot_reusable(self, now: float, reuse: bool) -> bool:
        """Whether the accounts' last snapshot will do (`reuse`: one at most _VIEW_REUSE_S old)."""
        read = self._snapshot
        return reuse and read is not None and 0 <= now - read[0] <= _VIEW_REUSE_S

    def _views(self, allowed: list[str] | None = None) -> list[AccountView]:
        """The accounts as the chooser sees them, from the last snapshot (the same list for every acquire that reads
        that snapshot with the same allowed accounts: nothing changes it)."""
        assert self._snapshot is not None
        states = self._snapshot[1]
        last = self._last_views
        if last is not None and last[0] is states and last[1] is allowed:
            return last[2]
        config = self.pool.get
        views = [
            AccountView(config(state.name), state, first_free)  # type: ignore[arg-type]  # the pool's own accounts
            for state, first_free in states
            if allowed is None or state.name in allowed
        ]
        self._last_views = (states, allowed, views)
        return views


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


def _starting(start: AttemptStart | None, account: AccountConfig, want: float | None) -> Attempt | None:
    """The attempt to start with a slot on `account`, in the slot's own script (None: apart, after it: a capped
    account may give the slot back once its budget is read)."""
    return None if start is None or account.capped else start.on(account.name, want)
