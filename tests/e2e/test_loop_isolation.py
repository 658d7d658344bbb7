"""One tenant's bad item never stops another's, with real `claudeq-worker` processes on a real Redis:
a schedule whose next tick cannot be computed is paused with its error where users look while the other schedules
go on firing; a running job whose record the reconciler cannot handle ends failed with the reconciler's error after
`loop_item_max_failures` passes while other jobs run; a notification the worker's settings refuse goes dead without
failing its job."""

from __future__ import annotations

import json
import time

import pytest
import redis
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import make_worker_store
from tests.e2e.conftest import WorkerFactory
from tests.integration.test_cli_output import cli
from tests.support.aio import run
from tests.support.procs import run_until

pytestmark = pytest.mark.e2e


def inject_schedule(redis_client: redis.Redis, settings: Settings, tenant: str, name: str, **rule: object) -> None:
    """A schedule written straight into Redis, as an older version or anyone with the Redis could: past the checks
    `add_schedule` makes today, due now."""
    keys = Keys(settings.key_prefix)
    member = f"{tenant}/{name}"
    schedule = {"name": name, "spec": {"prompt": "[[sim: text x]] broken", "tenant": tenant}, **rule}
    redis_client.hset(keys.schedules, member, json.dumps(schedule))
    redis_client.zadd(keys.schedules_due, {member: time.time() - 0.5})


def test_a_schedule_that_breaks_the_scheduler_is_paused_and_the_others_keep_firing(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    workers()
    # A 7-field cron whose only tick is long past: computing its next tick raises inside the scheduler's pass.
    inject_schedule(redis_client, settings, "default", "no-next-tick", cron="0 0 1 1 * 0 2020")
    inject_schedule(redis_client, settings, "default", "far-future", every_s=10**12)
    client.add_schedule("steady", prompt=f'[[sim: text "tick"]] steady {unique}', every_s=1)
    time.sleep(7)
    infos = {i.schedule.name: i for i in client.schedules()}  # listing never raises on a stored schedule
    assert infos["steady"].fired >= 4, infos["steady"]
    broken = infos["no-next-tick"]
    assert broken.schedule.paused and broken.last_error and "next tick" in broken.last_error, broken
    client.pause_schedule("steady")
    for name in ("steady", "no-next-tick", "far-future"):
        client.remove_schedule(name)


def test_a_running_job_the_reconciler_cannot_handle_ends_failed_with_its_error_and_others_run(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    # Jobs whose worker died mid-run: one with its record damaged (a fence no version parses), one whose key holds
    # no record at all, both before a sound one in the reconciler's order; each pass fails on the first two.
    store = make_worker_store(settings, redis_client)
    ids = []
    for name, prompt in (("damaged", "p"), ("sound", f'[[sim: text "ok"]] recovered beside damaged jobs {unique}')):
        record = JobRecord(id=f"{name}-{unique}", spec=JobSpec(prompt=prompt), status="queued", created_at=utcnow())
        ids.append(run_call(store.create_call(record))[0])
        run(store.send(store.claim_call(ids[-1], "gone-worker", 1)))
    bad, sound = ids
    no_record = f"no-record-{unique}"
    redis_client.hset(store.keys.job(bad), "fence", "not-a-number")
    redis_client.set(store.keys.job(no_record), "not a job record")
    redis_client.zadd(store.keys.running, {bad: 0, no_record: 1, sound: 2})  # every lease long expired
    workers(loop_item_max_failures=3)
    assert client.wait(sound, timeout=120).status == "succeeded"  # recovered, re-sent and run
    good = client.submit(prompt=f'[[sim: text "ok"]] beside a damaged job {unique}')
    assert good.wait(timeout=120).status == "succeeded"
    run_until(
        lambda: redis_client.hget(store.keys.job(bad), "status") == b"failed",
        timeout=60,
        what=f"job {bad}: the reconciler never gave up on it",
    )
    failed = client.get(bad)  # readable: the failing write gave it a fence that parses
    assert failed.error is not None and failed.error.kind == "internal", failed.error
    assert "the reconciler could not handle this job in 3 passes" in failed.error.message, failed.error
    shown = cli(settings, "status", bad)
    assert shown.returncode == 0 and "reconciler could not handle this job" in " ".join(shown.stdout.split()), shown
    assert redis_client.zscore(store.keys.running, bad) is None
    run_until(  # out of the index, and no count of failures left behind
        lambda: (
            redis_client.zscore(store.keys.running, no_record) is None
            and not list(redis_client.scan_iter(match=f"{settings.key_prefix}loop-failures:*"))
        ),
        timeout=30,
        what="the id with no record never left the running index",
    )
    redis_client.delete(store.keys.job(no_record))


def test_a_webhook_host_the_worker_does_not_allow_fails_the_notification_not_the_job(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    # The producer allows the host; the worker's settings do not (the operator narrowed its list).
    producer = Client(
        client.settings.model_copy(
            update={"webhook_hosts": ["hooks.example.com"], "webhook_secret": SecretStr("whsec_" + "A" * 32)}
        )
    )
    try:
        workers(webhook_hosts=[])
        handle = producer.submit(
            prompt=f'[[sim: text "ok"]] hooked {unique}', webhook={"url": "https://hooks.example.com/x"}
        )
        done = handle.wait(timeout=120)
        assert done.status == "succeeded", done.error
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            notes = {n.target: n for n in producer.get(handle.id).notifications}
            if "webhook" in notes and notes["webhook"].state == "dead":
                break
            time.sleep(0.2)
        note = notes["webhook"]
        assert note.state == "dead" and note.error is not None and "webhook.url" in note.error, note
    finally:
        producer.close()


def test_a_failed_runs_error_never_shows_the_workers_pass_through_address(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    workers()
    job = client.submit(prompt=f"[[sim: error 500]] broken {unique}", max_attempts=1)
    done = client.wait(job.id, timeout=120)
    assert done.status == "failed" and done.error is not None
    texts = [done.error.message, *(a.detail or "" for a in done.attempts)]
    texts += [json.dumps(e.data) for e in client.events(job.id)]
    assert texts and not [t for t in texts if "127.0.0.1:" in t or "localhost:" in t or "[::1]:" in t], texts
