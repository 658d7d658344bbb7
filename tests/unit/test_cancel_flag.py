"""A job cancelled while it ran, then requeued (a shutdown) before the worker saw the flag, and cancelled again
while queued: the terminal cancel leaves no cancel flag behind (found by tests/chaos/test_status_machine.py)."""

from __future__ import annotations

import fakeredis

from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore
from tests.support.aio import run


def test_cancelling_a_requeued_job_deletes_the_flag_its_run_left() -> None:
    client = fakeredis.FakeRedis()
    keys = Keys("cqt-flag:")
    store = WorkerJobStore(client, keys, result_ttl_s=600, events_maxlen=100)
    job_id, _ = run_call(
        store.create_call(JobRecord(id="j1", spec=JobSpec(prompt="x"), status="queued", created_at=utcnow()))
    )
    claim = run(store.send(store.claim_call(job_id, "w1", 60)))
    assert store.cancel(job_id) == "running" and client.hexists(keys.job(job_id), "cancel")
    assert run(
        store.send(store.write_call(JobWrite(job_id, claim.fence, "queued")))
    )  # requeued before the run saw the flag
    assert store.cancel(job_id) == "cancelled"
    assert not client.hexists(keys.job(job_id), "cancel")
