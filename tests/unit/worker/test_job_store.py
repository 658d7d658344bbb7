"""WorkerJobStore (claudeq/worker/store/job_store.py) on fakeredis: claim, lease, fenced writes, every worker-side
status transition, recovery, re-sends, TTLs."""

from __future__ import annotations

from datetime import timedelta

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.jobs import parse_record
from claudeq.models import Attempt, Event, JobError, JobRecord, JobResult, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.support.aio import run
from tests.support.jobs import queued, queued_record


@pytest.fixture
def fake_store(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> WorkerJobStore:
    """A WorkerJobStore on fakeredis."""
    return make_worker_store(fake_settings, fake_redis)


def test_claim_moves_queued_to_running_with_a_fence_and_lease(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert claim.ok and claim.fence == 1
    record = run_call(fake_store.get_call(job_id))
    assert (record.status, record.worker, record.fence) == ("running", "w1", 1)
    assert record.started_at is not None
    assert fake_store.lease_alive(job_id)
    assert job_id in fake_store.running_ids()
    assert fake_store.redis.zscore(fake_store.keys.queued, job_id) is None


def test_a_second_delivery_of_a_running_job_is_busy(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert run(fake_store.send(fake_store.claim_call(job_id, "w2", 10))).result == "busy"


def test_a_running_job_without_lease_is_an_orphan_for_the_reconciler(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    fake_store.redis.zadd(fake_store.keys.running, {job_id: 0})
    assert run(fake_store.send(fake_store.claim_call(job_id, "w2", 10))).result == "orphan"


def test_claim_of_unknown_or_finished_job_is_refused(fake_store: WorkerJobStore) -> None:
    assert run(fake_store.send(fake_store.claim_call("nope", "w1", 10))).result == "missing"
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    run(fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "succeeded"))))
    assert run(fake_store.send(fake_store.claim_call(job_id, "w1", 10))).result == "succeeded"


def test_heartbeat_only_extends_our_own_lease(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert run(fake_store.send(fake_store.beat_call(job_id, "w1", claim.fence, 10))).ours
    assert not run(fake_store.send(fake_store.beat_call(job_id, "w2", claim.fence, 10))).ours
    assert not run(fake_store.send(fake_store.beat_call(job_id, "w1", claim.fence + 1, 10))).ours


def test_succeeded_write_sets_result_and_retention_ttl(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    fake_store.append_event(job_id, Event(type="claimed"))
    ok = run(
        fake_store.send(
            fake_store.write_call(
                JobWrite(
                    job_id,
                    claim.fence,
                    "succeeded",
                    fields={"result": JobResult(text="done"), "session_id": "s1", "account": "a"},
                )
            )
        )
    )
    assert ok
    record = run_call(fake_store.get_call(job_id))
    assert (record.status, record.session_id, record.account) == ("succeeded", "s1", "a")
    assert record.result is not None and record.result.text == "done"
    assert record.finished_at is not None
    assert 0 < fake_store.redis.ttl(fake_store.keys.job(job_id)) <= fake_store.result_ttl_s
    # The event stream was moved into the record, which expires with its retention: no stream is left behind.
    assert not fake_store.redis.exists(fake_store.keys.events(job_id))
    assert [e.type for _, e in fake_store.read_events(job_id)] == ["submitted", "claimed"]
    assert not fake_store.lease_alive(job_id)
    assert job_id not in fake_store.running_ids()


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_other_terminal_states_keep_the_error(fake_store: WorkerJobStore, status: str) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert run(
        fake_store.send(
            fake_store.write_call(
                JobWrite(job_id, claim.fence, status, fields={"error": JobError(kind="job", message="boom")})
            )
        )
    )  # type: ignore[arg-type]
    record = run_call(fake_store.get_call(job_id))
    assert record.status == status
    assert record.error is not None and record.error.message == "boom"


def test_stale_fence_cannot_write(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    old = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    # w1 paused, its lease expired, the reconciler gave the job back and w2 took it over.
    fake_store.redis.zadd(fake_store.keys.running, {job_id: 0})
    assert run(fake_store.recover(job_id, old.fence, [Attempt(number=1, outcome="worker_lost", started_at=utcnow())]))
    new = run(fake_store.send(fake_store.claim_call(job_id, "w2", 10)))
    assert new.fence == old.fence + 1
    assert not run(
        fake_store.send(
            fake_store.write_call(
                JobWrite(job_id, old.fence, "failed", fields={"error": JobError(kind="job", message="late")})
            )
        )
    )
    assert run(fake_store.send(fake_store.write_call(JobWrite(job_id, new.fence, "succeeded"))))
    assert not run(fake_store.send(fake_store.write_call(JobWrite(job_id, new.fence, "failed"))))
    assert run_call(fake_store.get_call(job_id)).status == "succeeded"


def test_terminal_states_never_change(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    run(fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "succeeded"))))
    assert fake_store.cancel(job_id) == "succeeded"
    assert not run(fake_store.promote(job_id, force=True))
    assert run_call(fake_store.get_call(job_id)).status == "succeeded"


def test_running_to_deferred_to_queued_via_promote(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    ready = utcnow() + timedelta(seconds=30)
    assert run(
        fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "deferred", fields={"ready_at": ready})))
    )
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "deferred" and record.ready_at is not None
    assert run(fake_store.due_deferred()) == []
    assert not run(fake_store.promote(job_id))  # not due yet
    assert run(fake_store.due_deferred(now=ready.timestamp() + 1)) == [job_id]
    assert run(fake_store.promote(job_id, now=ready.timestamp() + 1))
    assert not run(fake_store.promote(job_id, now=ready.timestamp() + 1))  # claimed once only
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "queued" and record.ready_at is None
    assert fake_store.redis.zscore(fake_store.keys.queued, job_id) is not None


def test_running_to_queued_requeue(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    attempts = [Attempt(number=1, outcome="requeued", started_at=utcnow())]
    assert run(
        fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "queued", fields={"attempts": attempts})))
    )
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "queued"
    assert [a.outcome for a in record.attempts] == ["requeued"]
    assert run(fake_store.send(fake_store.claim_call(job_id, "w2", 10))).ok


@pytest.mark.parametrize("waiting", ["queued", "deferred"])
def test_cancel_a_waiting_job_at_once(fake_store: WorkerJobStore, waiting: str) -> None:
    job_id = queued(fake_store)
    if waiting == "deferred":
        claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
        run(
            fake_store.send(
                fake_store.write_call(
                    JobWrite(job_id, claim.fence, "deferred", fields={"ready_at": utcnow() + timedelta(hours=1)})
                )
            )
        )
    assert fake_store.cancel(job_id) == "cancelled"
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "cancelled"
    assert record.error is not None and record.error.kind == "cancelled"
    assert fake_store.redis.zscore(fake_store.keys.deferred, job_id) is None
    assert fake_store.redis.zscore(fake_store.keys.queued, job_id) is None
    assert fake_store.redis.ttl(fake_store.keys.job(job_id)) > 0
    assert [e.type for _, e in fake_store.read_events(job_id)] == ["submitted", "cancelled"]


def test_cancel_a_running_job_sets_the_flag_and_publishes(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    pubsub = fake_store.redis.pubsub()
    pubsub.subscribe(fake_store.keys.cancel_channel)
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    assert fake_store.cancel(job_id) == "running"
    assert fake_store.cancel_requested(job_id)
    message = pubsub.get_message(timeout=1)
    assert message is not None and message["data"] == job_id.encode()
    assert run_call(fake_store.get_call(job_id)).status == "running"  # the worker finishes the transition


def test_reconciler_recovery_requires_an_expired_lease(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    lost = [Attempt(number=1, outcome="worker_lost", started_at=utcnow())]
    assert not run(fake_store.recover(job_id, claim.fence, lost))  # lease still alive
    fake_store.redis.zadd(fake_store.keys.running, {job_id: 0})
    assert run(fake_store.recover(job_id, claim.fence, lost))
    assert not run(fake_store.recover(job_id, claim.fence, lost))  # only once
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "queued"
    assert [a.outcome for a in record.attempts] == ["worker_lost"]


def test_unclaimed_queued_jobs_are_resent_once(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store)
    fake_store.redis.zadd(fake_store.keys.queued, {job_id: 0})
    assert run(fake_store.stale_queued(older_than_s=60)) == [job_id]
    assert run(fake_store.claim_resend(job_id, older_than_s=60))
    assert not run(fake_store.claim_resend(job_id, older_than_s=60))
    assert run(fake_store.stale_queued(older_than_s=60)) == []


def test_list_filters_by_status_newest_first(fake_store: WorkerJobStore) -> None:
    for job_id in ("a", "b", "c"):
        run_call(fake_store.create_call(queued_record(job_id)))
    claim = run(fake_store.send(fake_store.claim_call("b", "w", 10)))
    run(fake_store.send(fake_store.write_call(JobWrite("b", claim.fence, "succeeded"))))
    assert [r.id for r in fake_store.list_jobs() if isinstance(r, JobRecord)] == ["c", "b", "a"]
    assert [r.id for r in fake_store.list_jobs(status="queued") if isinstance(r, JobRecord)] == ["c", "a"]
    assert fake_store.count_by_status() == {"queued": 2, "succeeded": 1}


def test_trim_index_drops_only_expired_jobs(fake_store: WorkerJobStore) -> None:
    for job_id in ("old", "kept"):
        run_call(fake_store.create_call(queued_record(job_id)))
    fake_store.redis.zadd(fake_store.keys.jobs, {"old": 0, "kept": 0})
    fake_store.redis.delete(fake_store.keys.job("old"))
    assert run(fake_store.trim_index()) == 1
    assert fake_store.redis.zscore(fake_store.keys.jobs, "kept") is not None


def test_idempotency_key_lives_as_long_as_its_job(fake_store: WorkerJobStore) -> None:
    job_id, _ = run_call(fake_store.create_call(queued_record("a", idempotency_key="k")))
    idem = fake_store.keys.idem("k")
    assert fake_store.redis.ttl(idem) == -1  # no expiry while the job is alive, however long it waits
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    run(fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "succeeded"))))
    assert 0 < fake_store.redis.ttl(idem) <= fake_store.result_ttl_s  # then the job's retention


def test_only_the_first_claim_ends_the_queue_wait(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    first = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert first.first
    run(
        fake_store.send(fake_store.write_call(JobWrite(job_id, first.fence, "deferred", fields={"ready_at": utcnow()})))
    )
    assert run(fake_store.promote(job_id, force=True))
    again = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert again.ok
    assert not again.first


def test_a_lost_job_with_an_unreadable_record_can_still_be_recovered(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    fake_store.redis.hset(fake_store.keys.job(job_id), "spec", "{not json")
    fake_store.redis.zadd(fake_store.keys.running, {job_id: 0})
    assert run(fake_store.fence_of(job_id)) == claim.fence
    assert run(fake_store.recover(job_id, claim.fence, None))
    assert run_call(fake_store.status_call(job_id)) == "queued"


def test_the_claim_reads_the_record_in_the_same_step(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    claim = run(fake_store.send(fake_store.claim_call(job_id, "w1", 10)))
    assert claim.fields is not None
    assert parse_record(job_id, claim.fields) == run_call(fake_store.get_call(job_id))
    assert not run(fake_store.send(fake_store.claim_call(job_id, "w2", 10))).fields  # a refused claim reads nothing
    run(fake_store.send(fake_store.write_call(JobWrite(job_id, claim.fence, "queued"))))
    again = run(fake_store.send(fake_store.claim_call(job_id, "w2", 10)))
    assert again.fields is not None and not again.first
    assert parse_record(job_id, again.fields) == run_call(fake_store.get_call(job_id))


def test_the_claim_says_whether_a_cancel_flag_is_set(fake_store: WorkerJobStore) -> None:
    job_id = queued(fake_store, "j1")
    assert run(fake_store.send(fake_store.claim_call(job_id, "w1", 10))).cancelled is False
    run(fake_store.send(fake_store.write_call(JobWrite(job_id, 1, "queued"))))
    fake_store.redis.hset(fake_store.keys.job(job_id), "cancel", "1")  # asked while it ran, then requeued
    assert run(fake_store.send(fake_store.claim_call(job_id, "w1", 10))).cancelled is True
