"""What a job's own status moves cost in Redis commands (every `redis.call` inside a script counts in
`INFO commandstats`): submit, claim and the terminal write of a typical job. The `queued`, `deferred` and `running`
gauges are the sizes of those indexes, which the same scripts keep anyway: no counter is bumped beside them. A
private redis-server, so the counts are ours alone."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.models import Event, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.metrics.exporter import status_counts
from claudeq.worker.store.job_store import JobWrite, WorkerJobStore, make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.redis_server import command_calls, commands_since, private_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private_redis() -> Iterator[tuple[redis.Redis, Settings]]:
    with private_client() as (client, url):
        yield client, make_settings(url, "cost")


def _job(store: WorkerJobStore, job_id: str) -> None:
    run_call(store.create_call(JobRecord(id=job_id, spec=JobSpec(prompt="cost"), status="queued", created_at=utcnow())))


def test_submit_claim_and_finish_bump_no_status_counter(private_redis: tuple[redis.Redis, Settings]) -> None:
    client, settings = private_redis
    store = make_worker_store(settings, client)
    _job(store, "warm-up")  # the scripts are loaded (SCRIPT LOAD once)
    claim = run(store.send(store.claim_call("warm-up", "w", 15)))
    assert run(
        store.send(store.write_call(JobWrite("warm-up", claim.fence, "succeeded", events=[Event(type="succeeded")])))
    )

    before = command_calls(client)
    _job(store, "job-1")
    create = commands_since(client, before)
    before = command_calls(client)
    claim = run(store.send(store.claim_call("job-1", "w", 15)))
    claimed = commands_since(client, before)
    assert claim.ok
    assert status_counts(client, store.keys, time.time())["running"] == 1
    before = command_calls(client)
    assert run(
        store.send(
            store.write_call(
                JobWrite("job-1", claim.fence, "succeeded", events=[Event(type="succeeded")], stream=False)
            )
        )
    )
    finish = commands_since(client, before)

    # One counter per finished job (the hour its retention ends); none for queued, running or deferred.
    assert "hincrby" not in create and "hincrby" not in claimed, (create, claimed)
    assert finish.get("hincrby") == 1, finish
    # create: the script, the record, the `jobs` and `queued` entries. claim: the script, the record read (the
    # cancel flag with it) and written, out of `queued`, into `running` (scored by lease expiry: the lease itself).
    # finish of a job whose events never went to a stream: the script, the fence read, out of `running` (its lease
    # with it), the finished counter, the expiry, the record.
    assert sum(create.values()) <= 4, create
    assert claimed == {"evalsha": 1, "hgetall": 1, "hset": 1, "zrem": 1, "zadd": 1}, claimed
    assert finish == {"evalsha": 1, "hmget": 1, "zrem": 1, "hincrby": 1, "expire": 1, "hset": 1}, finish
    counts = status_counts(client, store.keys, time.time())
    assert (counts["queued"], counts["running"], counts["succeeded"]) == (0, 0, 2)
