"""The engine with fakes of the runner, accounts and metrics, on fakeredis: claim, attempts, fencing, cancel,
deferral, shutdown and bad input, asserted on the job record, its events and the fakes' calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import fakeredis
import pytest

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.accounts.manager import SlotLease
from claudeq.worker.delivery.engine import Engine
from claudeq.worker.delivery.ports import Ports
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.engine_fakes import (
    FakeAccounts,
    FakeAdmission,
    FakeMetrics,
    FakeRunner,
    blocking,
    failure,
    rate_limited,
    sends_into,
    success,
)

A = AccountConfig(name="a", kind="oauth", token_env="T_A")
B = AccountConfig(name="b", kind="oauth", token_env="T_B")


class Harness:
    def __init__(self, settings: Settings, store: WorkerJobStore, runner: FakeRunner, accounts: FakeAccounts) -> None:
        self.store = store
        self.runner = runner
        self.accounts = accounts
        self.metrics = FakeMetrics()
        self.sent: list[str] = []
        self.engine = Engine(
            settings,
            store=store,
            ports=Ports(accounts, runner, self.metrics),
            send=sends_into(self.sent),
            worker_id="w1",
        )
        self.engine.start()

    def submit(self, **spec: Any) -> str:
        spec.setdefault("prompt", "hello")
        record = JobRecord(id=f"job{time.monotonic_ns()}", spec=JobSpec(**spec), status="queued", created_at=utcnow())
        return run_call(self.store.create_call(record))[0]

    def deliver(self, job_id: str) -> str:
        return str(self.engine.deliver_blocking(job_id))

    def start_delivery(self, job_id: str, started: threading.Event) -> Callable[[], list[str]]:
        """Deliver from another thread (as Celery does); return once the run started, with a `finish()` that
        waits for the delivery and gives its result."""
        result: list[str] = []
        thread = threading.Thread(target=lambda: result.append(self.deliver(job_id)))
        thread.start()
        assert started.wait(5)

        def finish() -> list[str]:
            thread.join(5)
            return result

        return finish

    def events(self, job_id: str) -> list[str]:
        """The worker's events (`submitted`, made from the record for every job, left out)."""
        return [e.type for _, e in self.store.read_events(job_id) if e.type != "submitted"]


@pytest.fixture
def settings(unique: str) -> Settings:
    return make_settings(
        "redis://127.0.0.1:1/0",
        unique,
        heartbeat_s=0.05,
        lease_ttl_s=1,
        retry_base_s=0.01,
        retry_max_s=0.02,
        max_attempts=3,
    )


@pytest.fixture
def store(settings: Settings) -> WorkerJobStore:
    return make_worker_store(settings, fakeredis.FakeRedis())


@pytest.fixture
def make(settings: Settings, store: WorkerJobStore) -> Iterator[Any]:
    made: list[Harness] = []

    def build(*scripts: Any, accounts: FakeAccounts | None = None, cfg: Settings | None = None) -> Harness:
        harness = Harness(cfg or settings, store, FakeRunner(*scripts), accounts or FakeAccounts(A))
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.engine.stop()


def test_success_records_result_session_usage_and_events(make: Any) -> None:
    h = make(success("hello there", n=10))
    job = h.submit()
    assert h.deliver(job) == "succeeded"
    record = run_call(h.store.get_call(job))
    assert record.status == "succeeded" and record.error is None
    assert record.result is not None and record.result.text == "hello there"
    assert record.session_id == "s-ok" and record.account == "a" and record.worker == "w1"
    assert [(a.number, a.outcome, a.account, a.session_id) for a in record.attempts] == [(1, "success", "a", "s-ok")]
    assert record.result.usage.input_tokens == 10 and record.attempts[0].usage is not None
    assert h.events(job) == ["claimed", "session", "assistant_text", "attempt_finished", "succeeded"]
    assert all(e.attempt == 1 for _, e in h.store.read_events(job) if e.type != "submitted")
    assert h.accounts.held == {} and h.accounts.released == [job]
    assert h.metrics.of("job_finished") == [(h.engine.settings.queue, "succeeded")]
    assert h.metrics.of("attempt") == [("a", "success")]
    assert h.metrics.of("run_started") == [("a",)] and h.metrics.of("run_ended") == [("a",)]
    assert h.metrics.of("usage")[0][1].input_tokens == 10


def test_transient_errors_retry_and_usage_is_summed_over_attempts(make: Any) -> None:
    h = make(failure(n=1, got_result=True, is_error=True, api_error_status=529), failure(n=2), success(n=10))
    job = h.submit()
    assert h.deliver(job) == "succeeded"
    record = run_call(h.store.get_call(job))
    assert [a.outcome for a in record.attempts] == ["transient_error", "transient_error", "success"]
    assert [a.number for a in record.attempts] == [1, 2, 3]
    assert record.result is not None and record.result.usage.input_tokens == 13
    assert record.result.usage.model_usage["m"]["inputTokens"] == 13
    assert sum(args[1].input_tokens for args in h.metrics.of("usage")) == 13
    assert h.events(job).count("retry") == 2
    assert h.metrics.of("retry") == [("transient",), ("transient",)]


def test_transient_errors_exhaust_max_attempts(make: Any) -> None:
    h = make(*[failure(got_result=False)] * 2)
    job = h.submit(max_attempts=2)
    assert h.deliver(job) == "failed"
    record = run_call(h.store.get_call(job))
    assert record.error is not None and record.error.kind == "transient"
    assert [a.outcome for a in record.attempts] == ["transient_error", "transient_error"]
    assert record.result is not None and record.result.text == "API Error"  # partial output kept


def test_rate_limit_cools_the_account_and_reruns_elsewhere_uncounted(make: Any) -> None:
    resets = utcnow() + timedelta(hours=1)
    h = make(rate_limited(resets), success(), accounts=FakeAccounts(A, B))
    job = h.submit(max_attempts=1)
    assert h.deliver(job) == "succeeded"
    record = run_call(h.store.get_call(job))
    assert [(a.outcome, a.account) for a in record.attempts] == [("rate_limited", "a"), ("success", "b")]
    assert h.accounts.cooled["a"] == resets
    assert h.accounts.observed[0][0] == "a" and h.accounts.observed[0][1].status == "rejected"
    assert h.metrics.of("rate_limit_event")[0][0] == "a"
    assert "retry" not in h.events(job)


def test_rate_limit_with_no_other_account_defers_until_the_reset(make: Any) -> None:
    resets = utcnow() + timedelta(hours=1)
    accounts = FakeAccounts(A)
    h = make(rate_limited(resets), accounts=accounts)
    job = h.submit()
    assert h.deliver(job) == "deferred"
    record = run_call(h.store.get_call(job))
    assert record.status == "deferred" and record.ready_at is not None
    assert h.store.redis.zscore(h.store.keys.deferred, job) is not None
    assert accounts.waiters == [(["a"], job)]
    assert "deferred" in h.events(job)


def test_no_free_slot_defers_without_running(make: Any) -> None:
    accounts = FakeAccounts(A)
    accounts.held["other"] = "a"
    h = make(accounts=accounts)
    job = h.submit()
    assert h.deliver(job) == "deferred"
    assert h.runner.requests == []
    assert run_call(h.store.get_call(job)).attempts == []


def test_no_account_can_ever_run_it_fails_the_job(make: Any) -> None:
    h = make(accounts=FakeAccounts(A, permanent=True))
    job = h.submit()
    assert h.deliver(job) == "failed"
    error = run_call(h.store.get_call(job)).error
    assert error is not None and error.kind in ("account", "configuration") and "no account" in error.message


def test_auth_failure_disables_the_account_and_reruns_elsewhere(make: Any) -> None:
    h = make(
        failure(got_result=True, is_error=True, assistant_error="authentication_failed"),
        success(),
        accounts=FakeAccounts(A, B),
    )
    job = h.submit()
    assert h.deliver(job) == "succeeded"
    assert "a" in h.accounts.disabled
    assert [(a.outcome, a.account) for a in run_call(h.store.get_call(job)).attempts] == [
        ("auth_failed", "a"),
        ("success", "b"),
    ]


def test_job_failure_is_not_retried_and_keeps_the_session(make: Any) -> None:
    h = make(failure(got_result=True, is_error=True, subtype="error_max_turns"))
    job = h.submit()
    assert h.deliver(job) == "failed"
    record = run_call(h.store.get_call(job))
    assert record.error is not None and record.error.kind == "job"
    assert record.session_id == "s-1" and len(record.attempts) == 1


def test_long_backoff_defers_the_job_instead_of_holding_the_thread(make: Any, settings: Settings) -> None:
    cfg = settings.model_copy(update={"retry_base_s": 100.0, "retry_max_s": 100.0, "retry_in_place_max_s": 0.0})
    h = make(failure(got_result=False), cfg=cfg)
    job = h.submit()
    assert h.deliver(job) == "deferred"
    record = run_call(h.store.get_call(job))
    assert record.status == "deferred" and record.ready_at is not None and record.ready_at > utcnow()
    assert [a.outcome for a in record.attempts] == ["transient_error"]
    assert h.accounts.held == {}


def test_cancel_stops_the_run_and_keeps_partial_output(make: Any) -> None:
    started = threading.Event()
    h = make(blocking(started))
    job = h.submit()
    finish = h.start_delivery(job, started)
    assert h.store.cancel(job) == "running"
    h.engine.request_cancel(job)
    assert finish() == ["cancelled"]
    record = run_call(h.store.get_call(job))
    assert record.status == "cancelled" and record.session_id == "s-block"
    assert record.result is not None and record.result.text == "partial"
    assert record.attempts[-1].outcome == "cancelled"


def test_cancel_flag_is_caught_by_the_heartbeat_when_the_wakeup_is_missed(make: Any) -> None:
    started = threading.Event()
    h = make(blocking(started))
    job = h.submit()
    finish = h.start_delivery(job, started)
    h.store.cancel(job)  # no request_cancel: only the flag
    assert finish() == ["cancelled"]


def test_cancelled_before_the_run_does_not_run(make: Any) -> None:
    h = make(success())
    job = h.submit()
    h.store.redis.hset(h.store.keys.job(job), "cancel", "1")
    assert h.deliver(job) == "cancelled"
    assert h.runner.requests == []


def test_duplicate_delivery_while_running_is_dropped(make: Any) -> None:
    started = threading.Event()
    h = make(blocking(started), success())
    job = h.submit()
    thread = threading.Thread(target=h.deliver, args=(job,))
    thread.start()
    assert started.wait(5)
    assert h.deliver(job) == "dropped:busy"
    h.engine.request_cancel(job)
    thread.join(5)
    assert len(h.runner.requests) == 1


def test_finished_job_delivery_is_dropped(make: Any) -> None:
    h = make(success(), success())
    job = h.submit()
    h.deliver(job)
    assert h.deliver(job) == "dropped:succeeded"
    assert len(h.runner.requests) == 1


def test_stale_worker_cannot_overwrite_after_takeover(make: Any, store: WorkerJobStore) -> None:
    started = threading.Event()
    h = make(blocking(started))
    job = h.submit()
    finish = h.start_delivery(job, started)
    # Another worker takes over: the lease is gone and the job is claimed again with a new fence.
    store.redis.zadd(store.keys.running, {job: 0})
    record = run_call(store.get_call(job))
    assert run(store.recover(job, record.fence, record.attempts))
    assert run(store.send(store.claim_call(job, "w2", 30))).ok
    assert finish() == ["lost"]
    after = run_call(store.get_call(job))
    assert after.status == "running" and after.worker == "w2"
    assert after.result is None  # the stale worker wrote nothing


def test_unknown_job_is_dropped(make: Any) -> None:
    h = make()
    assert h.deliver("no-such-job") == "dropped:missing"


def test_unreadable_record_fails_the_job(make: Any, store: WorkerJobStore) -> None:
    h = make()
    job = h.submit()
    store.redis.hset(store.keys.job(job), "spec", "{not json")
    assert h.deliver(job) == "failed"
    raw = store.redis.hgetall(store.keys.job(job))
    assert raw[b"status"] == b"failed" and b"cannot be read" in raw[b"error"]


def test_spec_the_worker_policy_forbids_fails_with_input_error(make: Any) -> None:
    h = make(success())
    job = h.submit(tools=["Bash"])
    assert h.deliver(job) == "failed"
    error = run_call(h.store.get_call(job)).error
    assert error is not None and error.kind == "input" and "Bash" in error.message
    assert h.runner.requests == []


def test_shutdown_requeues_running_jobs(make: Any) -> None:
    started = threading.Event()
    h = make(blocking(started))
    job = h.submit()
    finish = h.start_delivery(job, started)
    h.engine.begin_shutdown(0.1).result(5)
    assert finish() == ["requeued"]
    record = run_call(h.store.get_call(job))
    assert record.status == "queued" and [a.outcome for a in record.attempts] == ["requeued"]
    assert h.sent == [job]
    assert h.deliver(job) == "handed_back"  # after shutdown began, nothing new is claimed


def test_released_slot_sends_the_waiter_it_was_handed_to(make: Any, store: WorkerJobStore) -> None:
    accounts = FakeAccounts(A)
    h = make(success(), accounts=accounts)
    waiting = h.submit()
    accounts.waiting_to_promote = [waiting]  # the release admits it (queued, holding the slot): only its message
    job = h.submit()
    h.sent.clear()
    assert h.deliver(job) == "succeeded"
    assert h.sent == [waiting]


def test_short_cooldown_on_the_only_account_is_waited_out_in_place(make: Any, settings: Settings) -> None:
    # The CLI reported a rejection that resets in a moment: wait_rate_limit sleeps until the reset (no slot held)
    # and the job runs on the same delivery instead of a round trip through the deferred set.
    cfg = settings.model_copy(update={"retry_in_place_max_s": 3.0})
    accounts = FakeAccounts(A)
    h = make(rate_limited(utcnow() + timedelta(seconds=1)), success(), accounts=accounts, cfg=cfg)
    job = h.submit()
    started = time.monotonic()
    assert h.deliver(job) == "succeeded"
    waited = time.monotonic() - started
    record = run_call(h.store.get_call(job))
    assert [a.outcome for a in record.attempts] == ["rate_limited", "success"]
    assert accounts.waiters == []  # never deferred
    assert "deferred" not in h.events(job)
    assert h.metrics.of("retry") == [("rate_limit",)]
    assert waited >= 0.5  # it really waited for the cooldown to end (functional bound, not a timing claim)


def test_cooldown_longer_than_the_in_place_bound_defers(make: Any) -> None:
    accounts = FakeAccounts(A)
    h = make(rate_limited(utcnow() + timedelta(seconds=60)), accounts=accounts)
    job = h.submit()
    assert h.deliver(job) == "deferred"
    assert [a.outcome for a in run_call(h.store.get_call(job)).attempts] == ["rate_limited"]


def test_a_run_that_finished_as_shutdown_began_keeps_its_success(make: Any) -> None:
    from tests.support.engine_fakes import finishes_after_cancel

    started = threading.Event()
    h = make(finishes_after_cancel(started))
    job = h.submit()
    finish = h.start_delivery(job, started)
    h.engine.begin_shutdown(0.05).result(5)
    assert finish() == ["succeeded"]  # not requeued and run a second time
    record = run_call(h.store.get_call(job))
    assert record.status == "succeeded"
    assert [a.outcome for a in record.attempts] == ["success"]
    assert h.sent == []


def test_a_redis_blip_leaves_the_job_to_the_reconciler_instead_of_failing_it(make: Any) -> None:
    from tests.support.engine_fakes import FlakyAccounts

    h = make(success(), accounts=FlakyAccounts(A, failures=1))
    job = h.submit()
    assert h.deliver(job) == "dropped:redis"
    record = run_call(h.store.get_call(job))
    assert record.status == "running"  # no terminal write: the lease expires and the reconciler re-enqueues it
    assert record.error is None
    h.store.redis.zadd(h.store.keys.running, {job: 0})
    assert run(h.store.recover(job, record.fence, record.attempts))
    assert h.deliver(job) == "succeeded"


def test_a_worker_that_lost_the_job_leaves_its_account_slot_alone(make: Any, store: WorkerJobStore) -> None:
    started = threading.Event()
    accounts = FakeAccounts(A)
    h = make(blocking(started), accounts=accounts)
    job = h.submit()
    finish = h.start_delivery(job, started)
    # Another worker took the job over (its lease expired while this one was paused): new fence, same slot member.
    store.redis.zadd(store.keys.running, {job: 0})
    record = run_call(store.get_call(job))
    assert run(store.recover(job, record.fence, record.attempts))
    assert run(store.send(store.claim_call(job, "w2", 30))).ok
    assert finish() == ["lost"]
    assert job not in accounts.released  # the new owner may hold this very slot
    assert run_call(store.get_call(job)).status == "running"


def test_a_delivery_claimed_as_shutdown_begins_is_requeued_without_running(make: Any) -> None:
    h = make(success())
    job = h.submit()
    h.engine.handler.closing = lambda: True  # the shutdown began between the claim and the first attempt
    assert h.deliver(job) == "requeued"
    assert h.runner.requests == []
    assert run_call(h.store.get_call(job)).status == "queued"
    assert h.sent == [job]


class _OrderedAdmission(FakeAdmission):
    """Records when attempts' spend is counted, in its accounts' log."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def settle(self, lease: SlotLease, cost_usd: float, turns: int | None = None) -> None:
        self.log.append("settle")
        await super().settle(lease, cost_usd, turns)


class _OrderedAccounts(FakeAccounts):
    """Records the order in which attempts' spend is counted and slots are given back."""

    def __init__(self, *accounts: Any) -> None:
        super().__init__(*accounts)
        self.log: list[str] = []
        self.admission = _OrderedAdmission(self.log)

    async def release(self, lease: SlotLease) -> list[str]:
        self.log.append("release")
        return await super().release(lease)


def test_an_attempts_spend_is_counted_before_its_slot_is_given_back(make: Any) -> None:
    # The release drops the run's reservation and wakes waiters, whose admission reads the spend: counted after it,
    # runs started on what looked left would take a capped tenant past its cap.
    accounts = _OrderedAccounts(A)
    h = make(failure(n=1, got_result=True, is_error=True, api_error_status=529), success(n=10), accounts=accounts)
    job = h.submit()
    assert h.deliver(job) == "succeeded"
    assert accounts.log == ["settle", "release", "settle", "release"]  # the retry's, then the end's
