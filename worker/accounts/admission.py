"""TenantAdmission: a tenant's admission of a run (its runs in flight, its share, its spend caps) and its spend.

It owns what the tenants file governs between a run's claim and its end: whether a tenant may start one more run
and with what budget (`admit_run`, then `admitted` once the run tried for a slot), the tenant's share cap under
reserved fair share (`share`, with the fleet's `slots` and the runs' moving length `run_s`), a run's end on the
tenant's side (`end_run`), the attempt's cost counted against its tenant's and account's spend (`settle`, or
`settle_parts` for the job's terminal write), a finished job out of its tenant's active jobs (`job_done`) and a
deferred job waiting for its tenant's next run to end (`add_tenant_waiter`). AccountManager composes it as
`AccountManager.admission` and leases the slots; the engine calls `settle`, `job_done` and `add_tenant_waiter` on
the part directly. Its calls go through the manager's sender (`send`), on the engine loop's async client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from claudeq.script_calls import Call
from claudeq.tenants import (
    BALANCE_REPAY_S,
    Admitted,
    AtMax,
    AttemptCost,
    OverBudget,
    Reserved,
    SettleArgs,
    TenantStore,
    caught_up,
    effective_cap,
)

from ...config.settings import Settings
from ...config.tenants import TenantConfig
from .choice import NoAccount

if TYPE_CHECKING:
    from .manager import SlotLease

__all__ = ["TenantAdmission", "over_budget"]

log = logging.getLogger("claudeq.accounts")

T = TypeVar("T")

#: The active tenants and their catch-up balances `share` read may be reused this long (s): RESERVE re-checks the
#: runs atomically; only which tenants are active and their balances may be that old.
_ACTIVE_REUSE_S = 0.25


class Send(Protocol):
    """The sender the part's calls go through (`AsyncCalls.send`: the engine loop's async client)."""

    def __call__(self, call: Call[T]) -> Awaitable[T]: ...


class TenantAdmission:
    """A tenant's runs: their admission, their share of the fleet's slots, their end and their spend."""

    def __init__(self, settings: Settings, tenant_store: TenantStore, slots: int, send: Send) -> None:
        self.settings = settings
        self.tenants = settings.tenants
        self.tenant_store = tenant_store
        self.send = send
        #: The fleet's slots as this worker knows them (reserved fair share divides them among active tenants).
        self.slots = slots
        # (read at, active tenants, their catch-up balances), reused for _ACTIVE_REUSE_S
        self._active: tuple[float, set[str], dict[str, float]] | None = None
        #: How long a tenant's run holds its slot here (s; a moving average of the runs released): one slot of
        #: catch-up repays about one run's length of balance (caught_up divides by at least BALANCE_REPAY_S).
        self.run_s = BALANCE_REPAY_S

    async def admit_run(
        self, tenant: TenantConfig, job_id: str, max_budget_usd: float | None, model: str | None
    ) -> tuple[Admitted, int | None] | NoAccount:
        """A tenant's admission of one more run (its runs in flight, its share, its spend caps): what it may spend
        and the cap on its runs now, or when to look again (the caller then gives back a slot the waiting line
        handed the job)."""
        share = await self.share(tenant)
        cap = effective_cap(tenant, share)
        now = time.time()
        admitted = await self.send(
            self.tenant_store.admit_call(
                tenant, job_id, self.settings.lease_ttl_s, max_budget_usd, now, model=model, share=share
            )
        )
        if isinstance(admitted, AtMax | Reserved):
            if isinstance(admitted, AtMax) and cap == tenant.max_concurrency:
                reason = f"tenant {tenant.name!r} has {cap} run(s) in flight (its max_concurrency)"
            elif isinstance(admitted, AtMax):
                reason = (
                    f"tenant {tenant.name!r} holds {cap} slot(s), its share of the fleet's {self.slots} while other "
                    "tenants are active (reserve_share)"
                )
            else:
                reason = f"what tenant {tenant.name!r} has left per {admitted.window} is reserved by its runs in flight"
            # Its next run's end promotes the job (tenant waiters); the slot expiry is the latest bound.
            return NoAccount(_dt(now + self.settings.lease_ttl_s), reason, [], tenant=tenant.name)
        if isinstance(admitted, OverBudget):
            return over_budget(f"tenant {tenant.name!r}", tenant, admitted)
        return admitted, cap

    async def admitted(
        self,
        tenant: TenantConfig,
        job_id: str,
        admitted: Admitted,
        cap: int | None,
        lease: SlotLease | NoAccount,
        rank: float | None,
    ) -> None:
        """A tenant's admitted run after its try for a slot: it keeps its place among the tenant's runs while it
        waits in the accounts' lines, or gives it up; a slot taken with a smaller budget reserves that one."""
        if isinstance(lease, NoAccount):
            if cap is not None and lease.accounts and not lease.permanent:
                # It waits in the accounts' lines: it keeps its place among its tenant's runs (until its slot expiry)
                # so the tenant's jobs in line and in flight stay within its cap (max_concurrency, or its share cap
                # under reserve_share). Otherwise a capped tenant's backlog queues in the lines past its cap, ahead
                # of other tenants' later-tagged jobs, and takes the slots its cap was meant to leave free (then
                # gives them back: it is at its cap).
                await self.send(self.tenant_store.unreserve_call(tenant.name, job_id))
            else:
                await self.send(self.tenant_store.release_call(tenant, job_id, pop=False))
            return
        if lease.budget_usd is not None and lease.budget_usd != admitted.budget_usd:
            await self.send(
                self.tenant_store.set_reserved_call(tenant.name, job_id, lease.budget_usd, admitted.turn_usd)
            )
        if rank is not None:
            # The fleet's virtual time moves on (with tenants the rank is the tag).
            await self.send(self.tenant_store.advance_call(rank))

    async def share(self, tenant: TenantConfig) -> int | None:
        """The tenant's share cap under reserved fair share (None: off, or no tenants file): its weighted share of
        the fleet's slots among the tenants active now, moved by its catch-up balance (a slot more while owed, a slot
        fewer while owing, per `run_s` of balance, rounded up; docs/architecture.md#fair-share). The active tenants
        are read with one pipeline and the balances moved on with one script, or both taken from a read under
        _ACTIVE_REUSE_S old (RESERVE re-checks the runs atomically; only which tenants are active and their balances
        may be that old)."""
        if not self.tenants.configured or not self.tenants.reserve_share:
            return None
        now = time.time()
        read = self._active
        if read is None or not 0 <= now - read[0] <= _ACTIVE_REUSE_S:
            active = await self.send(self.tenant_store.active_call(now))
            shares = {
                name: cap
                for name in sorted(active)
                if (cap := self.tenants.share_cap(self.tenants.governing(name), active, self.slots)) is not None
            }
            read = (now, active, await self.send(self.tenant_store.balance_call(shares, now, self.run_s)))
            self._active = read
        share = self.tenants.share_cap(tenant, read[1], self.slots)
        return None if share is None else caught_up(share, read[2].get(tenant.name, 0.0), self.run_s)

    async def end_run(self, lease: SlotLease, tenant: TenantConfig) -> list[str]:
        """The tenant's side of a release: its run ends (its length moves `run_s` on); returns the tenant's waiters
        popped (still `deferred`)."""
        if self.tenants.reserve_share:
            self.run_s += 0.2 * (time.monotonic() - lease.taken - self.run_s)
        share = await self.share(tenant)
        return await self.send(self.tenant_store.release_call(tenant, lease.job_id, share=share))

    async def settle(self, lease: SlotLease, cost_usd: float, turns: int | None = None) -> None:
        """Count a finished attempt's real cost against its tenant's and its account's spend (and drop the budget
        the run had reserved); learn what one turn of its model costs from it (`turns`: the turns it ran). A run
        admitted as no tenant's (no tenants file) counts against its account alone. One call on the async client."""
        call = self.tenant_store.settle_call(self._cost(lease, cost_usd, turns))
        if call is not None:
            await self.send(call)

    def settle_parts(self, lease: SlotLease, cost_usd: float, turns: int | None = None) -> SettleArgs | None:
        """`settle` as the `settle` Lua function's arguments, for a job's terminal write to run in its own script
        (WorkerJobStore.finish_call); None when there is nothing to count."""
        return self.tenant_store.settle_parts(self._cost(lease, cost_usd, turns))

    @classmethod
    def _cost(cls, lease: SlotLease, cost_usd: float, turns: int | None) -> AttemptCost:
        """What the run on `lease` settles: its cost, against whose spend, and whether it reserved a budget."""
        tenant, reserved = cls._settled(lease)
        account = lease.account
        return AttemptCost(tenant, account.name, lease.job_id, cost_usd, lease.model, turns, reserved, account.capped)

    @staticmethod
    def _settled(lease: SlotLease) -> tuple[str | None, bool]:
        """Whose spend a run's cost counts against besides its account's (None: no tenant's; without a tenants file
        `default`'s spend is the accounts' sum), and whether the run reserved a budget to drop: a tenant's run
        started with one did (its tenant admission, and a capped account's); a run of no tenant only on a capped
        account."""
        if lease.tenant is None:
            return None, lease.budget_usd is not None and lease.account.capped
        return lease.tenant, lease.budget_usd is not None

    async def job_done(self, tenant: str, job_id: str) -> None:
        """The job finished: out of its tenant's active jobs (the waiting count of `claudeq tenants`), in one
        pipeline on the async client."""
        await self.send(self.tenant_store.unindex_call(tenant, job_id))

    async def add_tenant_waiter(self, tenant: str, job_id: str, score: float) -> None:
        """A deferred job waits for one of its tenant's runs to end: the next such end promotes it."""
        config = self.tenants.governing(tenant)
        share = await self.share(config)
        fallback_s = self.settings.waiter_fallback_s
        if await self.send(self.tenant_store.wait_call(config, job_id, score, fallback_s=fallback_s, share=share)):
            log.info("job %s: a run of tenant %s ended while it was being deferred; it is due now", job_id, tenant)


def over_budget(who: str, tenant: TenantConfig, over: OverBudget) -> NoAccount:
    """When to look again for a run whose tenant or account (`who`) is over a spend cap: at its window's end, or
    never (`on_budget: fail`)."""
    reason = f"{who} is over its spend cap per {over.window} until {over.until.isoformat()}"
    if tenant.on_budget == "fail":
        return NoAccount(_dt(time.time()), reason, [], permanent=True, kind="budget_exceeded")
    return NoAccount(over.until, reason, [])


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)
