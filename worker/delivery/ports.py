"""What the engine needs of the runner, the account manager and the metrics, as Protocols (fakes stand in for tests).

No SDK here: the real implementations (claudeq.worker.run.runner.Runner, claudeq.worker.accounts.manager.AccountManager,
claudeq.worker.metrics.prometheus.WorkerMetrics) satisfy these structurally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from claudeq.models import JobSpec, Outcome, TerminalStatus, Usage

from ..accounts.choice import NoAccount
from ..accounts.manager import SlotLease, Spent
from ..run.outcome import RateLimitSignal, RunnerLike
from ..store.job_store import AttemptStart, SlotRelease

#: Sends the `claudeq.run` message for a job (spec None: the record is unreadable, use the default queue).
Sender = Callable[[str, JobSpec | None], Awaitable[None]]


class SignalsLike(Protocol):
    """claudeq.worker.accounts.signals.AccountSignals as the handler uses it: the rate-limit and auth signals, plain
    calls, which the pass-through's threads make too (the handler makes them on a Redis thread)."""

    def observe(self, account: str, signal: RateLimitSignal) -> None:
        """Record a rate-limit signal."""

    def cool(self, account: str, until: datetime, reason: str) -> None:
        """Cool the account (fleet-wide) until `until`."""

    def disable(self, account: str, reason: str) -> None:
        """Disable the account."""


class AdmissionLike(Protocol):
    """claudeq.worker.accounts.admission.TenantAdmission as the engine uses it: a tenant's runs' spend and end,
    coroutines on the engine loop."""

    async def add_tenant_waiter(self, tenant: str, job_id: str, score: float) -> None:
        """A deferred job waits for one of its tenant's runs to end."""

    async def settle(self, lease: SlotLease, cost_usd: float, turns: int | None = None) -> None:
        """Count a finished attempt's cost against its tenant's and account's spend."""

    async def job_done(self, tenant: str, job_id: str) -> None:
        """The job finished: out of its tenant's active jobs."""


class AccountsLike(Protocol):
    """claudeq.worker.accounts.manager.AccountManager as the engine uses it: coroutines on the engine loop; its
    `signals` part takes the rate-limit and auth signals (SignalsLike), its `admission` part a tenant's runs' spend
    and end (AdmissionLike)."""

    @property
    def signals(self) -> SignalsLike:
        """The accounts' health signals (AccountManager.signals)."""

    @property
    def admission(self) -> AdmissionLike:
        """The tenants' admission and spend (AccountManager.admission)."""

    async def acquire(
        self,
        job_id: str,
        spec: JobSpec,
        exclude: frozenset[str] = ...,
        rank: float | None = ...,
        holds: Collection[str] | None = ...,
        start: AttemptStart | None = ...,
        warm_wait_until: datetime | None = ...,
    ) -> SlotLease | NoAccount:
        """A slot on the best eligible account (better-ranked waiters first), or when to look again; `holds`: where
        the job may already hold one (None: anywhere); `start`: the attempt's start written with the slot when it
        can be (the lease says `started`; StartLost when the fence no longer holds the job)."""

    def expiring_keys(self, lease: SlotLease) -> list[str]:
        """The sorted sets holding the lease's run with an expiry (its account slot first, then its tenant's runs),
        which the run's heartbeat moves on in the same script as its lease."""

    async def release(self, lease: SlotLease) -> list[str]:
        """Free a slot; the waiters admitted into it (already queued): send their messages."""

    async def add_waiter(
        self,
        accounts: list[str],
        job_id: str,
        rank: float,
        model: str | None = ...,
        tenant: tuple[str, float] | None = ...,
    ) -> list[str]:
        """A deferred job waits in line on these accounts; the waiters admitted at once (already queued)."""

    async def admit(self) -> list[str]:
        """Hand every account's free slots to its best waiters; the jobs admitted (already queued)."""

    async def fair_key(self, job_id: str, spec: JobSpec) -> float | None:
        """The job's virtual finish tag in the waiting line (tenants configured), else None."""

    async def count_tokens(self, account: str, usage: Usage) -> None:
        """Add an attempt's input-side tokens to the account's counters (its prompt-cache hit ratio)."""

    def slot_release(
        self, lease: SlotLease, tenant: str, *, indexed: bool = True, spent: Spent | None = None
    ) -> SlotRelease | None:
        """What the job's terminal write may free (and count: `spent`) in its own script (None: `release` and the
        admission's `job_done` and `settle` do it)."""


class MetricsLike(Protocol):
    """claudeq.worker.metrics.prometheus.WorkerMetrics as the engine uses it (never raises)."""

    def job_finished(self, queue: str, status: TerminalStatus) -> None: ...
    def attempt(self, account: str, outcome: Outcome) -> None: ...
    def run_duration(self, account: str, model: str, seconds: float) -> None: ...
    def queue_wait(self, seconds: float) -> None: ...
    def run_started(self, account: str) -> None: ...
    def run_ended(self, account: str) -> None: ...
    def tenant_run(self, tenant: str) -> None: ...
    def tenant_cost(self, tenant: str, cost_usd: float) -> None: ...
    def tenant_tokens(self, tenant: str, usage: Usage) -> None: ...
    def usage(self, account: str, usage: Usage) -> None: ...
    def rate_limit_event(self, account: str, signal: RateLimitSignal) -> None: ...
    def retry(self, reason: str) -> None: ...
    def tool_call(self, tool: str) -> None: ...
    def mirror_error(self) -> None: ...
    def schedule_tick(self, outcome: str, n: int = 1) -> None: ...
    def loop_item_failed(self, loop: str) -> None: ...
    def notification(self, target: str, outcome: str, latency_s: float | None = None) -> None: ...


@dataclass(frozen=True)
class Ports:
    """What a worker's deliveries go through besides Redis, built once by whoever builds the engine: the account
    manager, the runner and the metrics (the real ones, or fakes)."""

    accounts: AccountsLike
    runner: RunnerLike
    metrics: MetricsLike
