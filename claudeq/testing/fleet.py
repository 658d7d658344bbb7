"""`Fleet`: a producer `Client` and an in-process worker on fakeredis (or a real Redis), with scripted runs and
virtual time. See docs/testing.md.

What is real: the producer (`Client`, `AsyncClient`: validation, the same scripts, idempotency, tenants), the
worker's engine and delivery handler (claims, fences, leases, attempts, the failure policy, retries, reroutes,
deferrals, conversations, budgets) and the account manager (slots, cooldowns, waiting lines). What is not: the CLI
(a `ScriptedRunner` answers instead), Celery (the fleet takes the messages the client pushed off their broker lists
and delivers them itself), the metrics (recorded in memory), the reconciler and the cancel listener (a cancel
reaches a run through its lease heartbeat, as when the listener misses it).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import jsonschema
import redis

from claudeq.broker import KOMBU_PRIORITY_STEPS, list_for
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.config.tenants import Tenants
from claudeq.errors import JobTimeout
from claudeq.keys import Keys
from claudeq.models import PARENT_JOB_KEY, TERMINAL, Event, JobRecord, JobSpec, Outcome, TerminalStatus, Usage
from claudeq.producer.client import AsyncClient, Client, JobHandle
from claudeq.script_calls import run_call
from claudeq.testing import clock as _clock
from claudeq.testing._loop import FleetStalled, jumped_s, virtual_loop
from claudeq.testing.replies import Answer, Failure, Match, Reply, Rule, ScriptedRunner, ToolCall, UnmatchedPrompt
from claudeq.transcripts import RedisSessionStore
from claudeq.worker.accounts.manager import AccountManager
from claudeq.worker.background.loops import Loops
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.failure import OutputCheck
from claudeq.worker.delivery.handler import DeliveryHandler
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.delivery.session_planner import SessionPlanner
from claudeq.worker.redaction import redact
from claudeq.worker.run.outcome import RateLimitSignal, RunOutcome, RunRequest
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store

#: The token variable the kit's accounts name (never read: no CLI runs).
TOKEN_ENV = "CLAUDEQ_TESTING_TOKEN"
#: At most this many deliveries per `run_until_idle` (a job that reschedules itself forever fails the test).
MAX_STEPS = 10_000


@dataclass(frozen=True)
class Delivery:
    """One delivery the in-process worker made: the job and what became of it (`succeeded`, `deferred`,
    `requeued`, `dropped:finished`, …: the label a Celery task of the real worker returns)."""

    job_id: str
    outcome: str


class Metrics:
    """The worker's metrics, recorded in memory as (name, args) (claudeq.worker.delivery.ports.MetricsLike)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def of(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of every call of `name`."""
        return [args for method, args in self.calls if method == name]

    def job_finished(self, queue: str, status: TerminalStatus) -> None:
        self.calls.append(("job_finished", (queue, status)))

    def attempt(self, account: str, outcome: Outcome) -> None:
        self.calls.append(("attempt", (account, outcome)))

    def run_duration(self, account: str, model: str, seconds: float) -> None:
        self.calls.append(("run_duration", (account, model, seconds)))

    def queue_wait(self, seconds: float) -> None:
        self.calls.append(("queue_wait", (seconds,)))

    def run_started(self, account: str) -> None:
        self.calls.append(("run_started", (account,)))

    def run_ended(self, account: str) -> None:
        self.calls.append(("run_ended", (account,)))

    def tenant_run(self, tenant: str) -> None:
        self.calls.append(("tenant_run", (tenant,)))

    def tenant_cost(self, tenant: str, cost_usd: float) -> None:
        self.calls.append(("tenant_cost", (tenant, cost_usd)))

    def tenant_tokens(self, tenant: str, usage: Usage) -> None:
        self.calls.append(("tenant_tokens", (tenant, usage)))

    def usage(self, account: str, usage: Usage) -> None:
        self.calls.append(("usage", (account, usage)))

    def rate_limit_event(self, account: str, signal: RateLimitSignal) -> None:
        self.calls.append(("rate_limit_event", (account, signal)))

    def retry(self, reason: str) -> None:
        self.calls.append(("retry", (reason,)))

    def tool_call(self, tool: str) -> None:
        self.calls.append(("tool_call", (tool,)))

    def mirror_error(self) -> None:
        self.calls.append(("mirror_error", ()))

    def schedule_tick(self, outcome: str, n: int = 1) -> None:
        self.calls.append(("schedule_tick", (outcome, n)))

    def loop_item_failed(self, loop: str) -> None:
        self.calls.append(("loop_item_failed", (loop,)))

    def notification(self, target: str, outcome: str, latency_s: float | None = None) -> None:
        self.calls.append(("notification", (target, outcome)))


class _Handler(DeliveryHandler):
    """The real delivery handler, but a structured output is checked in this process: the real worker checks it in a
    child interpreter with a deadline (claudeq/worker/run/output_check.py), which a test's own schemas do not need."""

    async def _check_output(self, spec: JobSpec, outcome: RunOutcome) -> OutputCheck | None:
        data = outcome.result.structured_output
        if spec.output_schema is None or data is None or not outcome.got_result or outcome.is_error:
            return None
        try:
            jsonschema.validate(data, spec.output_schema)
        except jsonschema.ValidationError as exc:
            return OutputCheck(problem=exc.message[:300])
        return OutputCheck()


class FleetClient(Client):
    """The producer `Client` of a fleet. Everything is the real client's; `wait` and `events(follow=True)` drive the
    fleet's worker until the job is finished (virtual time: `timeout` is in the fleet's seconds)."""

    def __init__(self, fleet: Fleet, settings: Settings, redis_client: redis.Redis) -> None:
        super().__init__(settings, redis_client=redis_client)
        self.fleet = fleet

    def wait(self, job_id: str, timeout: Duration | None = None, poll_s: float = 0.2) -> JobRecord:
        """Run the fleet until the job is finished; JobTimeout when `timeout` virtual seconds (or a timedelta) pass
        first, FleetStalled when nothing is left to do and it is still not finished."""
        self.fleet.run_until_finished(job_id, timeout)
        return self.get(job_id)

    def events(self, job_id: str, follow: bool = False) -> Iterator[Event]:
        """The job's events; with `follow`, the fleet runs the job to its end first."""
        if follow:
            self.fleet.run_until_finished(job_id)
        return super().events(job_id, follow=False)


class FleetAsyncClient(AsyncClient):
    """The `AsyncClient` of a fleet (its sync side is the fleet's `FleetClient`): `wait` and `events(follow=True)`
    drive the fleet's worker in a thread, off the caller's event loop."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(client=fleet.client)
        self.fleet = fleet

    async def wait(self, job_id: str, timeout: Duration | None = None, poll_s: float = 0.2) -> JobRecord:  # noqa: ASYNC109
        """See FleetClient.wait."""
        await asyncio.to_thread(self.fleet.run_until_finished, job_id, timeout)
        return await self.get(job_id)

    async def events(self, job_id: str, follow: bool = False) -> AsyncIterator[Event]:
        """See FleetClient.events."""
        if follow:
            await asyncio.to_thread(self.fleet.run_until_finished, job_id)
        async for event in super().events(job_id, follow=False):
            yield event


#: A duration in the kit: seconds (as everywhere in claudeq), or a timedelta such as `record.ready_at - fleet.now()`.
Duration = float | timedelta


def _seconds(value: Duration | None) -> float | None:
    """`value` in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _account(item: AccountConfig | str) -> AccountConfig:
    if isinstance(item, AccountConfig):
        return item
    return AccountConfig(name=item, kind="oauth", token_env=TOKEN_ENV, max_concurrency=4)


def _job_id_of(raw: bytes | str) -> str | None:
    """The job id of a `claudeq.run` broker message (claudeq.broker), or None."""
    try:
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        job_id = body[0][0]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    return job_id if isinstance(job_id, str) else None


def _fleet_settings(
    redis_url: str | None,
    accounts: Sequence[AccountConfig | str],
    tenants: Tenants | Mapping[str, Any] | None,
    settings: Mapping[str, Any],
) -> Settings:
    """The fleet's settings: a key prefix (and, on a shared server, a queue) of its own, then `settings`."""
    token = uuid.uuid4().hex[:10]
    values: dict[str, Any] = {"redis_url": redis_url or "redis://fakeredis.invalid:6379/0"}
    values["key_prefix"] = f"cqtest-{token}:"
    if redis_url is not None:  # a shared server: a queue of its own too
        values["queue"] = f"claudeq-testing-{token}"
        values["queues"] = [values["queue"]]
    values.update(settings)
    fleet_settings = Settings(_env_file=None, **values)
    fleet_settings.__dict__["accounts"] = AccountPool(accounts=[_account(a) for a in accounts])
    if tenants is not None:
        fleet_settings.__dict__["tenants"] = (
            tenants if isinstance(tenants, Tenants) else Tenants.model_validate(dict(tenants))
        )
    return fleet_settings


class Fleet:
    """A claudeq fleet in this process: `client` / `async_client` to submit, scripted runs, virtual time.

    Made by `claudeq.testing.fleet()`; closes with `close()` or the end of its `with` block. Not for production: it
    patches `time.time` and `time.monotonic` process-wide while it is open (docs/testing.md#time)."""

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        accounts: Sequence[AccountConfig | str] = ("default",),
        tenants: Tenants | Mapping[str, Any] | None = None,
        default: Answer | None = None,
        worker_id: str = "worker-1",
        **settings: Any,
    ) -> None:
        self.redis_url = redis_url
        self.settings = _fleet_settings(redis_url, accounts, tenants, settings)
        self.clock = _clock.shared_clock()
        self._lock = threading.RLock()
        self._closed = False
        self._server: Any = None
        session_store = self._connect(redis_url)
        _clock.install(self.clock)
        try:
            self._build(default, worker_id, session_store)
            self._loops = Loops(self.engine)
            self._loop = virtual_loop(self.clock, io_grace_s=0.0 if redis_url is None else 0.005)
            self._run(self._start())
        except BaseException:
            _clock.uninstall(self.clock)
            raise
        self.deliveries: list[Delivery] = []

    def _connect(self, redis_url: str | None) -> RedisSessionStore | None:
        """`self.redis`: fakeredis (a server of its own) when no `redis_url`; the session store on it, if so."""
        if redis_url is None:
            import fakeredis

            self._server = fakeredis.FakeServer()
            self.redis: redis.Redis = fakeredis.FakeRedis(server=self._server)
            session_store: RedisSessionStore | None = RedisSessionStore(
                fakeredis.FakeAsyncRedis(server=self._server),
                Keys(self.settings.key_prefix),
                self.settings.session_retention_s,
                scrub=redact,
            )
        else:
            self.redis = redis.Redis.from_url(redis_url)
            session_store = None  # made on the worker's loop, on the same server (SessionPlanner.store)
        return session_store

    def _build(self, default: Answer | None, worker_id: str, session_store: RedisSessionStore | None) -> None:
        """The clients, the scripted runner, the real account manager and an engine whose handler is the fleet's."""
        self.client: Client = FleetClient(self, self.settings, self.redis)
        self.async_client: AsyncClient = FleetAsyncClient(self)
        self.worker_store: WorkerJobStore = make_worker_store(self.settings, self.redis)
        self.metrics = Metrics()
        self.runner = ScriptedRunner(
            self.settings,
            default,
            submit=self._child_submit,
            job_prompt=lambda job_id: run_call(self.worker_store.get_call(job_id)).spec.prompt,
        )
        self.accounts = AccountManager(self.settings, self.redis, Keys(self.settings.key_prefix))
        self.engine = Engine(
            self.settings,
            store=self.worker_store,
            ports=Ports(self.accounts, self.runner, self.metrics),
            send=self._send,
            worker_id=worker_id,
            sessions=SessionPlanner(self.settings, self.worker_store, store=session_store),
        )
        engine = self.engine
        engine.handler = _Handler(
            self.settings,
            ports=Ports(self.accounts, self.runner, self.metrics),
            sessions=engine.sessions,
            writer=engine.writer,
            dispatch=engine.dispatch,
            worker_id=worker_id,
            closing=lambda: engine.closing,
        )

    # ---- scripting ---------------------------------------------------------------------------------------------

    def reply(
        self,
        match: Match,
        *,
        text: str = "ok",
        structured: Any = None,
        usage: Usage | Mapping[str, Any] | None = None,
        tool_calls: Sequence[ToolCall] = (),
        turns: int = 1,
        times: int | None = None,
    ) -> None:
        """Answer the runs whose prompt matches `match` (a regular expression, searched) with this reply; `times`:
        only the next so many (None: every one). `match` may instead be a callable taking the `Run` and returning
        the answer (a `Reply`, a `Failure`, a text) or None to leave the run to the next rule. Rules are tried in
        the order they were given, failures (`fail`) first; a run no rule answers gets the fleet's `default`."""
        if callable(match) and not isinstance(match, str):
            self.runner.replies.append(Rule(match, [], times))
            return
        answer = Reply(text=text, structured=structured, usage=usage, tool_calls=tuple(tool_calls), turns=turns)
        self.runner.replies.append(Rule(match, [answer], times))

    def fail(self, match: Match, *failures: Failure | Reply) -> None:
        """The next runs whose prompt matches `match` meet these failures, one run each, in order (then the
        replies answer): `fleet.fail("triage", rate_limited(resets_in=60), overloaded())`."""
        if not failures:
            raise ValueError("fail() needs at least one failure, e.g. fleet.fail('triage', overloaded())")
        self.runner.failures.append(Rule(match, list(failures), len(failures), "fail"))

    # ---- driving the worker ------------------------------------------------------------------------------------

    def step(self) -> Delivery | None:
        """Deliver one job whose message waits (after moving due deferred jobs back to the queue); None when
        none waits now. Does not move the clock on between deliveries (`advance`, `run_until_idle` do)."""
        with self._lock:
            job_id = self._pop()
            if job_id is None:
                self._run(self._loops.promote_once())
                job_id = self._pop()
            if job_id is None:
                return None
            delivered = Delivery(job_id, str(self._run(self.engine.deliver(job_id))))
            self.deliveries.append(delivered)
            if self.runner.unmatched:
                first, *_ = self.runner.unmatched
                self.runner.unmatched.clear()
                raise UnmatchedPrompt(first)
            return delivered

    def run_until_idle(self, *, advance: bool = True, max_steps: int = MAX_STEPS) -> list[Delivery]:
        """Deliver until nothing is left to do; with `advance`, move the clock on to each deferred job's ready time
        (a cooldown's end, a backoff too long to wait in place) and go on. Returns the deliveries made."""
        return self._drive(lambda: False, advance=advance, max_steps=max_steps)

    def run_until_finished(self, job_id: str, timeout: Duration | None = None) -> JobRecord:
        """Drive the fleet until `job_id` is finished; JobTimeout after `timeout` virtual seconds (or timedelta),
        FleetStalled when nothing is left to do and the job is still not finished."""
        timeout = _seconds(timeout)
        deadline = None if timeout is None else self.clock.time() + timeout

        def finished() -> bool:
            status = run_call(self.worker_store.status_call(job_id))
            return status is None or status in TERMINAL

        self._drive(finished, advance=True, max_steps=MAX_STEPS, deadline=deadline)
        if not finished():
            if deadline is not None:
                raise JobTimeout(job_id, timeout or 0)
            status = run_call(self.worker_store.status_call(job_id))
            raise FleetStalled(f"job {job_id} is still {status} and the fleet has nothing left to do")
        return self.client.get(job_id)

    def advance(self, seconds: Duration) -> None:
        """Move the clock on by `seconds`, or a `timedelta` (`record.ready_at - fleet.now()`); nothing is delivered:
        `step` / `run_until_idle` do."""
        self.clock.advance(_seconds(seconds) or 0.0)

    def now(self) -> datetime:
        """The fleet's current time (UTC)."""
        return self.clock.utcnow()

    def _drive(
        self, done: Any, *, advance: bool, max_steps: int, deadline: float | None = None
    ) -> builtins.list[Delivery]:
        made: builtins.list[Delivery] = []
        with self._lock:
            while not done():
                if len(made) >= max_steps:
                    raise FleetStalled(f"still not idle after {max_steps} deliveries (a job that never settles?)")
                if deadline is not None and self.clock.time() >= deadline:
                    break
                delivered = self.step()
                if delivered is not None:
                    made.append(delivered)
                    continue
                due = self._next_due() if advance else None
                if due is None:
                    break
                target = due if deadline is None else min(due, deadline)
                self.clock.advance(max(0.0, target - self.clock.time()) + 0.001)
        return made

    def _next_due(self) -> float | None:
        """The earliest ready time of a deferred job (epoch s), if any."""
        first = self.redis.zrange(self.settings_keys.deferred, 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    @property
    def settings_keys(self) -> Keys:
        """The Redis key shapes of this fleet."""
        return self.worker_store.keys

    def _pop(self) -> str | None:
        """The job id of the oldest waiting message of the best priority step, taken off its broker list."""
        for queue in self.settings.queues:
            for step in KOMBU_PRIORITY_STEPS:
                while True:
                    raw = self.redis.rpop(list_for(queue, step))
                    if raw is None:
                        break
                    job_id = _job_id_of(raw) if isinstance(raw, bytes | str) else None
                    if job_id is not None:
                        return job_id
        return None

    async def _send(self, job_id: str, spec: JobSpec | None) -> None:
        # As the real worker sends (claudeq.worker.app.build_runtime): the message pushed, the job marked sent.
        queue = (spec.queue if spec else None) or self.settings.queue
        await self.worker_store.send_run(job_id, queue, spec.priority if spec else 0)

    def _child_submit(self, parent: str, spec: JobSpec | dict[str, Any] | None, **fields: Any) -> JobHandle:
        data: dict[str, Any] = dict(spec.model_dump(exclude_unset=True) if isinstance(spec, JobSpec) else spec or {})
        data.update(fields)
        metadata = dict(data.get("metadata") or {})
        metadata[PARENT_JOB_KEY] = parent
        data["metadata"] = metadata
        return self.client.submit(data)

    async def _start(self) -> None:
        self.engine._on_loop_start()

    def _run(self, coro: Any) -> Any:
        jumped_s(self._loop, reset=True)
        return self._loop.run_until_complete(coro)

    # ---- what happened -----------------------------------------------------------------------------------------

    def submitted(self) -> builtins.list[JobRecord]:
        """Every job of this fleet, oldest first (those submitted by the code under test, and by its runs)."""
        records = [r for r in self.client.list(limit=100_000) if isinstance(r, JobRecord)]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def specs(self) -> builtins.list[JobSpec]:
        """The specs of every job of this fleet, oldest first."""
        return [record.spec for record in self.submitted()]

    def record(self, job_id: str) -> JobRecord:
        """The job's record."""
        return self.client.get(job_id)

    def events(self, job_id: str) -> builtins.list[Event]:
        """The job's events so far (`submitted` first)."""
        return [event for _, event in self.client.store.read_events(job_id)]

    def event_types(self, job_id: str) -> builtins.list[str]:
        """The types of the job's events so far, in order."""
        return [event.type for event in self.events(job_id)]

    @property
    def runs(self) -> builtins.list[RunRequest]:
        """Every run the scripted runner was asked for, in order (job id, attempt, spec as sent, account, resume)."""
        return list(self.runner.requests)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker, restore the real clock, and (on a real Redis) delete this fleet's keys."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self._run(asyncio.gather(*pending, return_exceptions=True))
                with contextlib.suppress(Exception):
                    self._run(self.engine.sessions.aclose())
                self._loop.close()
                if self.redis_url is not None:
                    self._clean()
                self.redis.close()
            finally:
                _clock.uninstall(self.clock)

    def _clean(self) -> None:
        for key in self.redis.scan_iter(match=f"{self.settings.key_prefix}*", count=1000):
            self.redis.delete(key)
        for queue in self.settings.queues:
            for step in KOMBU_PRIORITY_STEPS:
                self.redis.delete(list_for(queue, step))

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def fleet(
    *,
    redis_url: str | None = None,
    accounts: Sequence[AccountConfig | str] = ("default",),
    tenants: Tenants | Mapping[str, Any] | None = None,
    default: Answer | None = None,
    **settings: Any,
) -> Fleet:
    """A fleet in this process (use it as a context manager, or `close()` it).

    `redis_url`: a real Redis to run on (this fleet's keys under a prefix of their own, deleted at close) instead of
    fakeredis. `accounts`: names (OAuth accounts, 4 runs at once each) or `AccountConfig`s. `tenants`: a `Tenants`
    or the tenants file's content as a mapping. `default`: what a run no rule matches answers. Other keyword
    arguments are claudeq settings (`max_attempts=2`, `policy={"fleet_tools": True}`, …)."""
    return Fleet(redis_url=redis_url, accounts=accounts, tenants=tenants, default=default, **settings)


__all__ = ["Delivery", "Fleet", "FleetAsyncClient", "FleetClient", "FleetStalled", "Metrics", "fleet"]
