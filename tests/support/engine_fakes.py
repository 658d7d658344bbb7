"""Small fakes of the runner, the account manager and the metrics, for the engine's and the loops' tests (unit and
integration): in memory, with what they were asked recorded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import Event, JobResult, JobSpec, Usage, utcnow
from claudeq.worker.accounts.choice import NoAccount
from claudeq.worker.accounts.manager import SlotLease, Spent
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.run.outcome import RateLimitSignal, RunOutcome
from claudeq.worker.store.job_store import SlotRelease, WorkerJobStore

Script = Callable[[Any, Callable[[Event], Awaitable[None]], asyncio.Event], Awaitable[RunOutcome]]


def usage(n: int) -> Usage:
    return Usage(input_tokens=n, output_tokens=2 * n, cost_usd=n / 1000, model_usage={"m": {"inputTokens": n}})


def success(text: str = "hi", n: int = 10, session: str = "s-ok") -> Script:
    async def run(req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        await emit(Event(type="session", data={"session_id": session}))
        await emit(Event(type="assistant_text", data={"text": text}))
        return RunOutcome(
            result=JobResult(text=text, usage=usage(n)), session_id=session, got_result=True, subtype="success"
        )

    return run


def failure(n: int = 1, **fields: Any) -> Script:
    async def run(req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        return RunOutcome(result=JobResult(text="API Error", usage=usage(n)), session_id=f"s-{req.attempt}", **fields)

    return run


def blocking(started: threading.Event, text: str = "partial") -> Script:
    """Runs until `cancel` is set (as the real runner does), then reports what it had."""

    async def run(req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        await emit(Event(type="session", data={"session_id": "s-block"}))
        started.set()
        await cancel.wait()
        return RunOutcome(
            result=JobResult(text=text, usage=usage(3)), session_id="s-block", stopped_by="cancel", got_result=False
        )

    return run


def rate_limited(resets_at: datetime) -> Script:
    return failure(
        got_result=True,
        is_error=True,
        api_error_status=429,
        rate_limits=[RateLimitSignal("rejected", resets_at=resets_at, window="five_hour")],
    )


class FakeRunner:
    """Plays one script per attempt, in order; records the requests."""

    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.requests: list[Any] = []
        self.checked: list[JobSpec] = []

    def check(self, spec: JobSpec) -> None:
        self.checked.append(spec)

    async def run(self, req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        self.requests.append(req)
        return await self.scripts[len(self.requests) - 1](req, emit, cancel)


class FakeSignals:
    """The accounts' health signals in memory (AccountSignals): what was observed, cooled and disabled."""

    def __init__(self) -> None:
        self.cooled: dict[str, datetime] = {}
        self.disabled: dict[str, str] = {}
        self.observed: list[tuple[str, RateLimitSignal]] = []

    def observe(self, account: str, signal: RateLimitSignal) -> None:
        self.observed.append((account, signal))

    def cool(self, account: str, until: datetime, reason: str) -> None:
        self.cooled[account] = until

    def disable(self, account: str, reason: str) -> None:
        self.disabled[account] = reason


class FakeAdmission:
    """A tenant's runs' spend and end in memory (TenantAdmission): what was settled, done and deferred."""

    def __init__(self) -> None:
        self.tenant_waiters: list[tuple[str, str]] = []
        self.settled: list[tuple[str, float]] = []
        self.done: list[tuple[str, str]] = []

    async def add_tenant_waiter(self, tenant: str, job_id: str, score: float) -> None:
        self.tenant_waiters.append((tenant, job_id))

    async def settle(self, lease: SlotLease, cost_usd: float, turns: int | None = None) -> None:
        self.settled.append((lease.job_id, cost_usd))

    async def job_done(self, tenant: str, job_id: str) -> None:
        self.done.append((tenant, job_id))


class FakeAccounts:
    """Slots per account in memory; cooling and disabled accounts (its `signals`' records) are skipped; its
    `admission` records a tenant's runs' spend and end."""

    def __init__(self, *accounts: AccountConfig, permanent: bool = False) -> None:
        self.accounts = list(accounts)
        self.permanent = permanent
        self.held: dict[str, str] = {}  # job id -> account
        self.signals = FakeSignals()
        # The signals' records, read here too (the fake's acquire skips what they cooled or disabled).
        self.cooled = self.signals.cooled
        self.disabled = self.signals.disabled
        self.observed = self.signals.observed
        self.admission = FakeAdmission()
        # The admission's records, read here too (as the tests read the accounts').
        self.tenant_waiters = self.admission.tenant_waiters
        self.settled = self.admission.settled
        self.done = self.admission.done
        self.waiters: list[tuple[list[str], str]] = []
        self.counted: list[tuple[str, Usage]] = []
        self.waiting_to_promote: list[str] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

    async def acquire(
        self, job_id: str, spec: JobSpec, exclude: frozenset[str] = frozenset(), *_: Any, **__: Any
    ) -> SlotLease | NoAccount:
        """A slot on the first account with one free (AccountManager.acquire's other arguments are not taken up:
        the attempt's start is written apart)."""
        with self.lock:
            if self.permanent:
                return NoAccount(utcnow(), "no account allows this job", [], permanent=True)
            now = utcnow()
            for account in self.accounts:
                busy = sum(1 for a in self.held.values() if a == account.name)
                cooling = self.cooled.get(account.name, now) > now
                if busy < account.max_concurrency and not cooling and account.name not in self.disabled:
                    self.held[job_id] = account.name
                    return SlotLease(account, job_id)
            cooling_ends = [end for end in self.cooled.values() if end > now]
            if cooling_ends and len(cooling_ends) == len(self.accounts):
                names = [a.name for a in self.accounts]
                return NoAccount(min(cooling_ends), "all accounts cooling", names, cooldown=True)
            return NoAccount(now + timedelta(seconds=30), "all accounts busy", [a.name for a in self.accounts])

    def expiring_keys(self, lease: SlotLease) -> list[str]:
        return []  # slots are held in memory here: the heartbeat has none to move

    async def release(self, lease: SlotLease) -> list[str]:
        with self.lock:
            self.held.pop(lease.job_id, None)
            self.released.append(lease.job_id)
            promote, self.waiting_to_promote = self.waiting_to_promote, []
            return promote

    async def add_waiter(self, accounts: list[str], job_id: str, *_: Any, **__: Any) -> list[str]:
        self.waiters.append((accounts, job_id))
        return []

    async def admit(self) -> list[str]:
        return []

    async def fair_key(self, job_id: str, spec: JobSpec) -> float | None:
        return None

    async def count_tokens(self, account: str, usage: Usage) -> None:
        self.counted.append((account, usage))

    def slot_release(
        self, lease: SlotLease, tenant: str, *, indexed: bool = True, spent: Spent | None = None
    ) -> SlotRelease | None:
        return None  # the fakes free slots through release and job_done, and count spend through settle (the admission)


class FakeMetrics:
    """Records every call as (method, args)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for method, args in self.calls if method == name]


def finishes_after_cancel(started: threading.Event, text: str = "DONE") -> Script:
    """The run's result arrives just as a stop is requested (the stop lands during the CLI's cleanup)."""

    async def run(req: Any, emit: Callable[[Event], Awaitable[None]], cancel: asyncio.Event) -> RunOutcome:
        started.set()
        await cancel.wait()
        return RunOutcome(
            result=JobResult(text=text, usage=usage(4)), session_id="s-done", got_result=True, subtype="success"
        )

    return run


class FlakyAccounts(FakeAccounts):
    """FakeAccounts whose first `n` acquires fail as if Redis were unreachable."""

    def __init__(self, *accounts: AccountConfig, failures: int = 1) -> None:
        super().__init__(*accounts)
        self.failures = failures

    async def acquire(self, *args: Any, **kwargs: Any) -> SlotLease | NoAccount:
        if self.failures > 0:
            self.failures -= 1
            import redis

            raise redis.ConnectionError("Redis went away")
        return await super().acquire(*args, **kwargs)


def sends_into(sent: list[str]) -> Callable[[str, JobSpec | None], Awaitable[None]]:
    """An engine's message sender that only notes the ids of the jobs it is asked to send."""

    async def send(job_id: str, spec: JobSpec | None) -> None:
        sent.append(job_id)

    return send


def fake_engine(settings: Settings, store: WorkerJobStore, sent: list[str], worker_id: str = "w-test") -> Engine:
    """An engine on fake accounts, runner and metrics whose messages are appended to `sent` (not started)."""
    return Engine(
        settings,
        store=store,
        ports=Ports(FakeAccounts(AccountConfig(name="a", kind="oauth", token_env="T")), FakeRunner(), FakeMetrics()),
        send=sends_into(sent),
        worker_id=worker_id,
    )
