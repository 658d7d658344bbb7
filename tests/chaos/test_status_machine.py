"""The status scripts against a model of the job state machine, on the real Redis: claim, heartbeat, fenced write
(any target status, `deferred` included), cancel, promote, recover, resend and lease expiry, in any order, with the
right fence, a stale one or a future one (hypothesis `RuleBasedStateMachine`). After every step Redis must agree
with the model — status, fence, live lease, cancel flag, the queued / deferred / running indexes, the status
counters — a terminal job never moves again, and a cancel flag never outlives `running`: a write to `queued` or
`deferred`, or a recovery, of a job with the flag ends it `cancelled`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from claudeq.keys import Keys
from claudeq.models import TERMINAL, Event, JobRecord, JobSpec, utcnow
from claudeq.producer.client import new_job_id
from claudeq.script_calls import run_call
from claudeq.worker.metrics.exporter import status_counts
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore
from tests.support.aio import run
from tests.support.redis_server import redis_url_for_tests

JOBS = 2
WORKERS = ("w1", "w2")
TTL_S = 3600  # leases never expire by themselves here: the `expire` rule is time passing


@dataclass
class ModelJob:
    """What the state machine says about one job."""

    id: str
    status: str = "queued"
    fence: int = 0
    lease: bool = False  # a live lease: its expiry in `running` is still to come
    worker: str | None = None  # who claimed it last
    cancel_flag: bool = False
    in_queued: bool = True
    in_deferred: bool = False
    history: list[str] = field(default_factory=list)


class StatusScripts(RuleBasedStateMachine):
    """One prefix per run; JOBS jobs created through the real CREATE script."""

    def __init__(self) -> None:
        super().__init__()
        url, self.server = redis_url_for_tests()
        self.redis = redis.Redis.from_url(url)
        self.keys = Keys(f"cqt-sm-{uuid.uuid4().hex[:10]}:")
        self.store = WorkerJobStore(self.redis, self.keys, result_ttl_s=600, events_maxlen=100)
        self.jobs: list[ModelJob] = []
        for _ in range(JOBS):
            record = JobRecord(id=new_job_id(), spec=JobSpec(prompt="model"), status="queued", created_at=utcnow())
            job_id, created = run_call(self.store.create_call(record))
            assert created
            self.jobs.append(ModelJob(job_id))

    def teardown(self) -> None:
        for key in self.redis.scan_iter(match=f"{self.keys.prefix}*", count=1000):
            self.redis.delete(key)
        self.redis.close()
        if self.server is not None:
            self.server.stop()

    # --- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def fence_for(job: ModelJob, offset: int) -> int:
        """The job's fence, one behind (a superseded run) or one ahead (never handed out)."""
        return max(0, job.fence + offset)

    def moved(self, job: ModelJob, status: str) -> None:
        assert job.status not in TERMINAL, f"{job.id}: a terminal job moved ({job.history})"
        job.history.append(f"{job.status}->{status}")
        job.status = status
        job.in_queued = status == "queued"
        job.in_deferred = status == "deferred"
        if status != "running":
            job.lease = False
        if status in TERMINAL:
            job.cancel_flag = False

    # --- rules -----------------------------------------------------------------------------------------------

    @rule(i=st.integers(0, JOBS - 1), worker=st.sampled_from(WORKERS))
    def claim(self, i: int, worker: str) -> None:
        job = self.jobs[i]
        got = run(self.store.send(self.store.claim_call(job.id, worker, TTL_S)))
        if job.status == "queued":
            assert got.ok and got.fence == job.fence + 1, (got, job)
            job.fence = got.fence
            self.moved(job, "running")
            job.lease = True
            job.worker = worker
        elif job.status == "running":
            assert got.result == ("busy" if job.lease else "orphan"), (got, job)
        else:
            assert not got.ok and got.result == job.status, (got, job)

    @rule(i=st.integers(0, JOBS - 1), worker=st.sampled_from(WORKERS), offset=st.integers(-1, 1))
    def heartbeat(self, i: int, worker: str, offset: int) -> None:
        job = self.jobs[i]
        fence = self.fence_for(job, offset)
        alive = run(self.store.send(self.store.beat_call(job.id, worker, fence, TTL_S))).ours
        # The fence says whose run it is (a lease that expired with nobody recovering the job is renewed).
        assert alive == (job.status == "running" and fence == job.fence and worker == job.worker), (alive, job)
        if alive:
            job.lease = True

    @rule(
        i=st.integers(0, JOBS - 1),
        offset=st.integers(-1, 1),
        status=st.sampled_from([None, "queued", "deferred", "succeeded", "failed", "cancelled"]),
    )
    def write(self, i: int, offset: int, status: str | None) -> None:
        job = self.jobs[i]
        fence = self.fence_for(job, offset)
        ready = {"ready_at": utcnow() - timedelta(seconds=1)} if status == "deferred" else {}
        event = Event(type=status) if status in ("deferred", "succeeded", "failed", "cancelled") else None
        ok = run(
            self.store.send(
                self.store.write_call(
                    JobWrite(job.id, fence, status, fields=ready, events=() if event is None else (event,))  # type: ignore[arg-type]
                )
            )
        )
        expected = job.status == "running" and fence == job.fence
        # A cancel is seen at every status write: a job with the flag never goes back to waiting, it ends.
        cancels = expected and status in ("queued", "deferred") and job.cancel_flag
        assert ok == ("cancelled" if cancels else expected), (ok, fence, job)
        if ok and status is not None:
            self.moved(job, "cancelled" if cancels else status)

    @rule(i=st.integers(0, JOBS - 1))
    def cancel(self, i: int) -> None:
        job = self.jobs[i]
        answer = self.store.cancel(job.id)
        if job.status in ("queued", "deferred"):
            assert answer == "cancelled", (answer, job)
            self.moved(job, "cancelled")
        elif job.status == "running":
            assert answer == "running", (answer, job)
            job.cancel_flag = True
        else:
            assert answer == job.status, (answer, job)

    @rule(i=st.integers(0, JOBS - 1), force=st.booleans())
    def promote(self, i: int, force: bool) -> None:
        job = self.jobs[i]
        ok = run(self.store.promote(job.id, force=force))
        # Deferred jobs here are due (ready a second ago), so force makes no difference.
        assert ok == (job.status == "deferred"), (ok, job)
        if ok:
            self.moved(job, "queued")

    @rule(i=st.integers(0, JOBS - 1), offset=st.integers(-1, 1), poisoned=st.booleans())
    def recover(self, i: int, offset: int, poisoned: bool) -> None:
        job = self.jobs[i]
        fence = self.fence_for(job, offset)
        error = None
        if poisoned:
            from claudeq.models import JobError

            error = JobError(kind="poisoned", message="lost its worker too often")
        ok = run(self.store.recover(job.id, fence, None, Event(type="requeued"), error=error))
        expected = job.status == "running" and fence == job.fence and not job.lease
        cancels = expected and not poisoned and job.cancel_flag  # not re-run: it was cancelled while it ran
        assert ok == ("cancelled" if cancels else expected), (ok, fence, job)
        if ok:
            self.moved(job, "failed" if poisoned else "cancelled" if cancels else "queued")

    @rule(i=st.integers(0, JOBS - 1))
    def resend(self, i: int) -> None:
        job = self.jobs[i]
        ok = run(self.store.claim_resend(job.id, older_than_s=-3600))  # any send time counts as old
        assert ok == (job.status == "queued"), (ok, job)

    @rule(i=st.integers(0, JOBS - 1))
    def expire(self, i: int) -> None:
        """Time passes: the job's lease (if any) expires."""
        job = self.jobs[i]
        if job.status == "running":
            self.redis.zadd(self.keys.running, {job.id: 1.0})  # an expiry long past
        job.lease = False

    # --- what must always hold -------------------------------------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        for job in self.jobs:
            stored = run(self.store.lease_state(job.id))
            fence, status = stored.fence, stored.status
            assert status == job.status and (fence or 0) == job.fence, (status, fence, job)
            expiry = self.redis.zscore(self.keys.running, job.id)
            assert (expiry is not None and expiry > time.time()) == job.lease, (expiry, job)
            assert bool(self.redis.hexists(self.keys.job(job.id), "cancel")) == job.cancel_flag, job
            assert (self.redis.zscore(self.keys.queued, job.id) is not None) == job.in_queued, job
            assert (self.redis.zscore(self.keys.deferred, job.id) is not None) == job.in_deferred, job
            assert (expiry is not None) == (job.status == "running"), job
            # Only a running job carries a cancel flag: a waiting one is cancelled at once, whoever moves first.
            assert not job.cancel_flag or job.status == "running", job
            if job.status in TERMINAL:
                assert self.redis.ttl(self.keys.job(job.id)) > 0, job  # retention set
            else:
                assert self.redis.ttl(self.keys.job(job.id)) == -1, job

    @invariant()
    def counters_match_the_statuses(self) -> None:
        counts = status_counts(self.redis, self.keys, time.time())  # what the exporter shows
        for status in ("queued", "deferred", "running"):
            expected = sum(1 for j in self.jobs if j.status == status)
            assert counts.get(status, 0) == expected, (status, counts, [(j.status, j.history) for j in self.jobs])


TestStatusScripts = StatusScripts.TestCase
TestStatusScripts.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
