"""The exporter's job gauges come from counters the status scripts keep in the same atomic step: after a mixed
workload (success, failure, cancel, defer, promote, retry, recovery) they equal a recount of every record, and a
scrape reads O(statuses) keys whatever the number of jobs."""

from __future__ import annotations

import time
from datetime import timedelta

import redis

from claudeq.config.settings import Settings
from claudeq.models import JobError, JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.metrics.exporter import ClusterCollector, status_counts
from claudeq.worker.store.job_store import JobWrite, make_worker_store
from tests.support.aio import run


def _gauges(settings: Settings, client: redis.Redis) -> dict[str, float]:
    collector = ClusterCollector(settings, client)
    for family in collector.collect():
        if family.name == "claudeq_jobs":
            return {sample.labels["status"]: sample.value for sample in family.samples}
    raise AssertionError("no claudeq_jobs family")


def test_counters_equal_a_recount_after_a_mixed_workload(
    settings: Settings, client: Client, redis_client: redis.Redis
) -> None:
    store = make_worker_store(settings, redis_client)
    ids = [h.id for h in client.submit_many([{"prompt": f"job {i}"} for i in range(12)])]
    ok, bad, cancelled, deferred, promoted, retried, lost, lost_then_ok, deferred_cancelled = ids[:9]
    for job_id, status in ((ok, "succeeded"), (bad, "failed")):
        claim = run(store.send(store.claim_call(job_id, "w1", 30)))
        fields = {"error": JobError(kind="job", message="x")} if status == "failed" else {}
        assert run(store.send(store.write_call(JobWrite(job_id, claim.fence, status, fields=fields))))  # type: ignore[arg-type]
    assert client.cancel(cancelled) == "cancelled"
    for job_id in (deferred, promoted, deferred_cancelled):
        claim = run(store.send(store.claim_call(job_id, "w1", 30)))
        assert run(
            store.send(
                store.write_call(
                    JobWrite(job_id, claim.fence, "deferred", fields={"ready_at": utcnow() + timedelta(hours=1)})
                )
            )
        )
    assert run(store.promote(promoted, force=True))
    assert client.cancel(deferred_cancelled) == "cancelled"
    claim = run(store.send(store.claim_call(retried, "w1", 30)))
    assert run(store.send(store.write_call(JobWrite(retried, claim.fence, "queued"))))  # a retry that re-enqueues
    for job_id in (lost, lost_then_ok):
        claim = run(store.send(store.claim_call(job_id, "dead-worker", 30)))
        redis_client.zadd(store.keys.running, {job_id: 0})
        assert run(store.recover(job_id, claim.fence, None))
    claim = run(store.send(store.claim_call(lost_then_ok, "w2", 30)))
    assert run(store.send(store.write_call(JobWrite(lost_then_ok, claim.fence, "succeeded"))))
    running = ids[9]
    run(store.send(store.claim_call(running, "w1", 30)))
    # A stale write (old fence) and a second claim change nothing, so they must not count either.
    assert not run(store.send(store.write_call(JobWrite(ok, 1, "failed"))))
    assert not run(store.send(store.claim_call(running, "w3", 30))).ok

    recount = store.count_by_status()
    assert recount == {"succeeded": 2, "failed": 1, "cancelled": 2, "deferred": 1, "queued": 5, "running": 1}
    counted = status_counts(redis_client, store.keys, time.time())
    assert {k: v for k, v in counted.items() if v} == recount
    gauges = _gauges(settings, redis_client)
    assert {k: int(v) for k, v in gauges.items() if v} == recount


def test_a_scrape_reads_the_same_keys_at_any_number_of_jobs(
    settings: Settings, client: Client, redis_client: redis.Redis
) -> None:
    class Counting(redis.Redis):
        commands = 0

        def execute_command(self, *args, **options):  # type: ignore[no-untyped-def]
            Counting.commands += 1
            return super().execute_command(*args, **options)

        def pipeline(self, transaction=True, shard_hint=None):  # type: ignore[no-untyped-def]
            pipe = super().pipeline(transaction, shard_hint)
            original = pipe.execute

            def execute(raise_on_error: bool = True):  # type: ignore[no-untyped-def]
                Counting.commands += len(pipe.command_stack)
                return original(raise_on_error)

            pipe.execute = execute  # type: ignore[method-assign]
            return pipe

    counting = Counting.from_url(settings.redis_url)
    costs = []
    for more in (10, 1990):  # 10 jobs, then 2,000
        client.submit_many([{"prompt": "p"}] * more)
        Counting.commands = 0
        _gauges(settings, counting)
        costs.append(Counting.commands)
    assert costs[0] == costs[1], costs


def test_a_finished_job_leaves_the_count_when_its_retention_hour_is_over(
    settings: Settings, redis_client: redis.Redis
) -> None:
    store = make_worker_store(settings, redis_client)
    job_id, _ = run_call(
        store.create_call(JobRecord(id="j-ttl", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow()))
    )
    claim = run(store.send(store.claim_call(job_id, "w", 30)))
    assert run(store.send(store.write_call(JobWrite(job_id, claim.fence, "succeeded"))))
    now = time.time()
    assert status_counts(redis_client, store.keys, now)["succeeded"] == 1
    later = now + settings.result_ttl_s + 3600
    assert status_counts(redis_client, store.keys, later)["succeeded"] == 0
    assert run(store.prune_finished_counts(later)) == 1
    assert redis_client.hlen(store.keys.finished_counts("succeeded")) == 0
