"""End to end: real Redis, real `claudeq-worker` processes, the real CLI against the simulator.

Each test asserts on the job record, its events, the simulator's stats and request log, and the process table.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from claudeq.config.settings import Settings
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client, new_job_id
from claudeq.script_calls import run_call
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, count_claude, run_until
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

#: docs/cli-behaviour.md#models-and-prices: USD per million tokens of the default model (claude-sonnet-5-5).
SONNET = {"input": 2.0, "output": 10.0, "cache_read": 0.10, "cache_creation": 2.50}
SONNET_WRITE_1H = 4.0  # a one-hour cache write: 2x input (docs/cli-behaviour.md#models-and-prices)


def events(client: Client, job_id: str) -> list[Any]:
    return list(client.events(job_id))


def wait(client: Client, job_id: str, timeout: float = 60) -> JobRecord:
    return client.wait(job_id, timeout=timeout, poll_s=0.1)


def test_submit_runs_to_success_with_text_session_tokens_and_cost(
    client: Client, workers: WorkerFactory, simulator: Any
) -> None:
    workers()
    job = client.submit(prompt='[[sim: text "hello from the simulator"]] [[sim: tokens out=40]] say hello')
    record = wait(client, job.id)
    assert record.status == "succeeded", record.error
    assert record.result is not None and "hello from the simulator" in (record.result.text or "")
    assert record.session_id and [a.outcome for a in record.attempts] == ["success"]
    assert record.attempts[0].session_id == record.session_id
    stats = simulator.stats()["sessions"][record.session_id]["tokens"]
    usage = record.result.usage
    assert usage.input_tokens == stats["input"]
    assert usage.output_tokens == stats["output"] == 40
    assert usage.cache_read_tokens == stats["cache_read"]
    assert usage.cache_creation_tokens == stats["cache_creation"]
    # The CLI asks for one-hour cache writes, priced at 2x input; the request log says how many were.
    one_hour = sum(
        r["usage"]["cache_creation_1h"] for r in simulator.requests() if r["session_id"] == record.session_id
    )
    assert 0 < one_hour <= stats["cache_creation"]
    expected = sum(stats[k] * SONNET[k] for k in SONNET) / 1e6 + one_hour * (SONNET_WRITE_1H - 2.50) / 1e6
    assert usage.cost_usd == pytest.approx(expected, rel=1e-6)
    types = [e.type for e in events(client, job.id)]
    for expected_type in ("submitted", "claimed", "run_started", "session", "assistant_text", "result", "succeeded"):
        assert expected_type in types


def test_worker_registered_mcp_tool_runs_in_the_worker_and_default_profile_offers_no_tools(
    client: Client, workers: WorkerFactory, simulator: Any, settings: Settings
) -> None:
    policy = settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})
    worker = workers(policy=policy)
    job = client.submit(prompt='[[sim: tool mcp__claudeq__add {"a": 2, "b": 3}]] add two and three', mcp_tools=["add"])
    record = wait(client, job.id)
    assert record.status == "succeeded", record.error
    evs = events(client, job.id)
    calls = [e for e in evs if e.type == "tool_call"]
    results = [e for e in evs if e.type == "tool_result"]
    assert calls and calls[0].data["tool"] == "mcp__claudeq__add"
    assert results and not results[0].data["is_error"]
    assert f"sum=5 pid={worker.pid}" in results[0].data["text"]  # ran inside the worker process
    assert record.result is not None and "sum=5" in (record.result.text or "")

    plain = client.submit(prompt="[[sim: text plain]] no tools here")
    assert wait(client, plain.id).status == "succeeded"
    session = client.get(plain.id).session_id
    main = [r for r in simulator.requests() if r.get("session_id") == session and r.get("kind") == "main"]
    assert main, "the simulator saw no request of the plain job"
    assert all(r["tool_names"] == [] for r in main), [r["tool_names"] for r in main]


def test_529_twice_then_success_on_attempt_three_with_backoff(client: Client, workers: WorkerFactory) -> None:
    workers()
    job = client.submit(prompt="[[sim: error 529 times=2]] retry me", max_attempts=3)
    record = wait(client, job.id, timeout=90)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["transient_error", "transient_error", "success"]
    retries = [e for e in events(client, job.id) if e.type == "retry"]
    assert len(retries) == 2 and all(e.data["reason"] == "transient" for e in retries)
    # Backoff between attempts: each next attempt starts no earlier than the previous finished plus its wait.
    for before, after, retry in zip(record.attempts, record.attempts[1:], retries, strict=False):
        assert before.finished_at is not None
        gap = (after.started_at - before.finished_at).total_seconds()
        assert gap >= retry.data["wait_s"] * 0.9


def test_stall_hits_the_idle_watchdog_retries_and_fails_with_timeout(client: Client, workers: WorkerFactory) -> None:
    workers()
    job = client.submit(prompt="[[sim: stall 60]] stall please", idle_timeout_s=2, max_attempts=2)
    started = time.monotonic()
    record = wait(client, job.id, timeout=90)
    elapsed = time.monotonic() - started
    assert record.status == "failed"
    assert record.error is not None and record.error.kind == "timeout"
    assert [a.outcome for a in record.attempts] == ["timeout", "timeout"]
    for attempt in record.attempts:
        assert attempt.finished_at is not None
        assert (attempt.finished_at - attempt.started_at).total_seconds() < 2 + 15  # well before the 60 s stall
    assert elapsed < 50
    assert count_claude([job.id]) == 0


def test_cancel_running_job_and_cli_env_holds_only_a_stand_in_token(
    client: Client, workers: WorkerFactory, accounts: Any
) -> None:
    workers()
    job = client.submit(prompt="[[sim: stall 60]] long one", idle_timeout_s=120)
    run_until(lambda: "session" in [e.type for e in events(client, job.id)], 60, what="run started")
    pids = run_until(lambda: claude_pids([job.id]), 10, what="claude process")
    record = client.get(job.id)
    own = next(a for a in accounts if a.name == record.account)
    for pid in pids:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        # Not even its own account's token: a stand-in of the same shape, valid through the worker's pass-through.
        for account in accounts:
            assert not any(account.token_value.encode() in v for v in environ)
        stand_in = [v for v in environ if v.startswith(b"CLAUDE_CODE_OAUTH_TOKEN=")]
        assert len(stand_in) == 1 and stand_in[0].startswith(b"CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-")
        assert own.token_value.encode() not in stand_in[0]
    flagged = time.monotonic()
    assert client.cancel(job.id) == "running"
    run_until(lambda: run_call(client.store.status_call(job.id)) == "cancelled", 10, 0.05, what="cancelled")
    assert time.monotonic() - flagged < 3  # about a second (interrupt ~0.5 s), with slack for a loaded machine
    record = client.get(job.id)
    assert record.error is not None and record.error.kind == "cancelled"
    assert record.session_id and [a.outcome for a in record.attempts] == ["cancelled"]
    run_until(lambda: count_claude([job.id]) == 0, 5, what="no claude left")


def test_kill_9_worker_mid_run_cli_dies_and_another_worker_finishes(
    client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    doomed = workers()
    job = client.submit(prompt="[[sim: stall 6 times=1]] survive a crash", idle_timeout_s=60)
    run_until(lambda: claude_pids([job.id]), 60, what="claude process")
    assert client.get(job.id).worker == doomed.worker_id
    rescuer = workers()
    children = claude_pids([job.id])
    doomed.kill()
    killed_at = time.monotonic()
    run_until(lambda: not any(pid in claude_pids([job.id]) for pid in children), 5, what="orphan CLI gone")
    record = wait(client, job.id, timeout=settings.lease_ttl_s + 40)
    assert record.status == "succeeded", record.error
    assert time.monotonic() - killed_at < settings.lease_ttl_s + 30
    outcomes = sorted(a.outcome or "" for a in record.attempts)
    assert outcomes == ["success", "worker_lost"]
    assert record.worker == rescuer.worker_id


def test_duplicate_delivery_while_running_runs_once(client: Client, workers: WorkerFactory) -> None:
    from claudeq.producer.client import send_run

    worker = workers()
    # Long enough that the duplicate reaches a worker while the run is still alive, even on a loaded machine.
    job = client.submit(prompt="[[sim: stall 10]] only once", idle_timeout_s=60)
    run_until(lambda: run_call(client.store.status_call(job.id)) == "running", 60, 0.05, what="running")
    send_run(client.celery, client.settings, job.id, client.get(job.id).spec)
    record = wait(client, job.id)
    assert record.status == "succeeded"
    assert len(record.attempts) == 1
    assert [e.type for e in events(client, job.id)].count("run_started") == 1
    run_until(lambda: "delivery dropped (busy)" in worker.log(), 10, what="duplicate dropped")


def test_structured_output_is_validated_against_the_schema(client: Client, workers: WorkerFactory) -> None:
    workers()
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
    job = client.submit(
        prompt='[[sim: structured {"city": "Lyon", "population": 522000}]] a city', output_schema=schema
    )
    record = wait(client, job.id)
    assert record.status == "succeeded", record.error
    assert record.result is not None and record.result.structured_output == {"city": "Lyon", "population": 522000}


def test_a_structured_output_too_deep_to_store_fails_the_job_once_as_output(
    client: Client, workers: WorkerFactory, simulator: Any, unique: str
) -> None:
    worker = workers()
    # 255 levels: deeper than the record's JSON encoder goes; the simulator builds it (a model is not capped either).
    prompt = f"[[sim: structured nested=255]] a deep answer {unique}"
    job = client.submit(prompt=prompt, output_schema={"type": "object"})
    record = wait(client, job.id)
    assert record.status == "failed", (record.status, record.error, record.attempts)
    assert record.error is not None and record.error.kind == "output" and not record.error.retryable
    assert "255 levels deep" in record.error.message and "not retried" in record.error.message
    assert [a.outcome for a in record.attempts] == ["failed"]  # one attempt, never recovered as worker_lost
    # What can be stored of the result is: its usage (the one run was billed once, and recorded), not the output.
    assert record.result is not None and record.result.structured_output is None
    assert record.result.usage.cost_usd > 0 and record.result.usage.output_tokens > 0
    assert [e.type for e in events(client, job.id)][-1] == "failed"

    # No second run: the simulator saw one request carrying the prompt, and past a lease nothing recovered the job
    # or ran it again.
    def runs() -> int:
        return sum(
            1
            for r in simulator.requests()
            if r["kind"] == "main" and any(unique in (m.get("text") or "") for m in r["messages"])
        )

    assert runs() == 1
    time.sleep(FAST_E2E["lease_ttl_s"] + 1)
    again = client.get(job.id)
    assert (again.status, again.attempts) == ("failed", record.attempts) and runs() == 1
    assert "internal error" not in worker.log()


def new_record(store: Any) -> str:
    """A queued record written straight to Redis, no message sent."""
    record = JobRecord(id=new_job_id(), spec=JobSpec(prompt="never runs"), status="queued", created_at=utcnow())
    job_id: str = run_call(store.create_call(record))[0]
    return job_id


def test_bad_input_fails_the_job_or_drops_the_message_and_the_worker_keeps_running(
    client: Client, workers: WorkerFactory, store: Any
) -> None:
    from claudeq.config.celery import TASK_RUN

    worker = workers()
    celery = client.celery
    queue = client.settings.queue
    celery.send_task(TASK_RUN, args=["no-such-job"], queue=queue)
    celery.send_task(TASK_RUN, args=[], queue=queue)
    celery.send_task(TASK_RUN, args=[{"not": "an id"}], queue=queue)

    # Records written past the client's validation (another version, a bug): one damaged, one the policy forbids.
    unreadable, forbidden = new_record(store), new_record(store)
    store.redis.hset(store.keys.job(unreadable), "spec", '{"tenant": "team-u", broken')
    for name in ("team-u", "default"):  # as a producer indexes a job of its tenant (`claudeq tenants` counts these)
        store.redis.zadd(store.keys.tenant_jobs(name), {unreadable: time.time()})
    store.redis.hset(store.keys.job(forbidden), "spec", '{"prompt": "x", "tools": ["Bash"]}')
    for job_id in (unreadable, forbidden):
        celery.send_task(TASK_RUN, args=[job_id], queue=queue)

    run_until(lambda: run_call(store.status_call(unreadable)) == "failed", 30, what="unreadable record failed")
    raw = store.redis.hget(store.keys.job(unreadable), "error").decode()
    assert '"internal"' in raw and "cannot be read" in raw
    # Failed, so no longer counted among its tenant's active jobs: the tenant its broken spec names, else default.
    run_until(
        lambda: not any(store.redis.zscore(store.keys.tenant_jobs(n), unreadable) for n in ("team-u", "default")),
        10,
        what="the unreadable job left the tenants' index",
    )
    run_until(lambda: run_call(store.status_call(forbidden)) == "failed", 30, what="forbidden spec failed")
    error = client.get(forbidden).error
    assert error is not None and error.kind == "input" and "Bash" in error.message
    run_until(lambda: "no-such-job: delivery dropped (missing)" in worker.log(), 10, what="unknown id logged")
    run_until(lambda: "malformed message" in worker.log(), 10, what="malformed message logged")
    assert worker.alive() and worker.heartbeat_fresh()
    assert count_claude([unreadable, forbidden]) == 0
