"""End to end: conversations across workers, turn order, retries that resume, transcript retention.

Real Redis, real `claudeq-worker` processes, the real CLI against the simulator; assertions on job records, their
events, the conversation, the simulator's request log and the Redis keys.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore
from claudeq.errors import JobSpecError
from claudeq.models import Event, JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client, new_job_id, push_run
from claudeq.script_calls import run_call
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e


def wait(client: Client, job_id: str, timeout: float = 90) -> JobRecord:
    return client.wait(job_id, timeout=timeout, poll_s=0.1)


def events(client: Client, job_id: str) -> list[Event]:
    return list(client.events(job_id))


def main_requests(simulator: Any, session_id: str) -> list[dict[str, Any]]:
    return [r for r in simulator.requests() if r.get("session_id") == session_id and r.get("kind") == "main"]


def texts(request: dict[str, Any]) -> list[str]:
    return [str(m.get("text") or "") for m in request["messages"]]


def test_turn_two_runs_on_another_worker_with_turn_one_in_its_request(
    client: Client, workers: WorkerFactory, simulator: Any, settings: Settings, tmp_path: Path, unique: str
) -> None:
    worker_a = workers(run_root=tmp_path / "root-a")
    first = client.submit(prompt=f'[[sim: text "REPLY-ALPHA"]] first turn ALPHA-{unique}', conversation=unique)
    one = wait(client, first.id)
    assert one.status == "succeeded", one.error
    worker_a.stop()
    # Worker B: its own config root and its own temp dir, so even its default cwd (the transcript's project key)
    # differs from A's: nothing of turn 1 is on its disk.
    tmp_b = tmp_path / "tmp-b"
    tmp_b.mkdir()
    worker_b = workers(run_root=tmp_path / "root-b", extra_env={"TMPDIR": str(tmp_b)})
    second = client.submit(prompt=f"second turn BETA-{unique}", conversation=unique)
    two = wait(client, second.id)
    assert two.status == "succeeded", two.error
    assert (one.worker, two.worker) == (worker_a.worker_id, worker_b.worker_id)
    assert one.session_id and two.session_id
    request = main_requests(simulator, two.session_id)[-1]
    said = texts(request)
    assert any(f"ALPHA-{unique}" in t for t in said) and any("REPLY-ALPHA" in t for t in said)
    assert any(f"BETA-{unique}" in t for t in said)
    conversations = ConversationStore.from_settings(settings)
    assert run_call(conversations.latest_session_call(unique)) == two.session_id
    info = conversations.info(unique)
    assert info is not None and [(t.job_id, t.status) for t in info.turns] == [
        (first.id, "succeeded"),
        (second.id, "succeeded"),
    ]
    plan = next(e for e in events(client, second.id) if e.type == "session_plan")
    assert plan.data["mode"] == "resume" and plan.data["resume"] == one.session_id


def test_turns_submitted_back_to_back_run_in_order_never_at_once(
    client: Client, workers: WorkerFactory, simulator: Any
) -> None:
    workers()  # concurrency 2: both turns are claimed at once, the second must wait
    first = client.submit(prompt="[[sim: delay 2]] turn one GAMMA", conversation="order")
    second = client.submit(prompt="turn two DELTA", conversation="order")
    one, two = wait(client, first.id), wait(client, second.id)
    assert (one.status, two.status) == ("succeeded", "succeeded"), (one.error, two.error)
    ev1, ev2 = events(client, first.id), events(client, second.id)
    one_started = next(e.at for e in ev1 if e.type == "run_started")
    one_done = next(e.at for e in ev1 if e.type == "succeeded")
    two_started = next(e.at for e in ev2 if e.type == "run_started")
    assert one_started < one_done <= two_started
    assert any(e.type == "deferred" and "waiting for turn" in e.data["reason"] for e in ev2)
    said = texts(main_requests(simulator, str(two.session_id))[-1])
    gamma = next(i for i, t in enumerate(said) if "GAMMA" in t)
    delta = next(i for i, t in enumerate(said) if "DELTA" in t)
    assert gamma < delta  # turn two's request carries turn one before it


def test_retry_after_tool_work_resumes_and_the_prompt_is_sent_once(
    client: Client, workers: WorkerFactory, simulator: Any, settings: Settings, unique: str
) -> None:
    policy = settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})
    workers(policy=policy)
    marker = f"EPSILON-{unique}"
    prompt = (
        '[[sim: tool mcp__claudeq__add {"a": 2, "b": 3}]] [[sim: error 500 after=1 times=1]] '
        f"add two and three {marker}"
    )
    job = client.submit(prompt=prompt, mcp_tools=["add"], conversation=f"retry-{unique}")
    record = wait(client, job.id)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["transient_error", "success"]
    evs = events(client, job.id)
    plans = [e.data for e in evs if e.type == "session_plan"]
    assert [p["mode"] for p in plans] == ["new", "continue"]
    assert plans[1]["resume"] == record.session_id
    assert len([e for e in evs if e.type == "tool_call"]) == 1  # the tool work of attempt 1 was kept
    requests = main_requests(simulator, str(record.session_id))
    assert len(requests) == 3  # tool_use, the 500, then the resumed request
    for request in requests:
        assert sum(marker in t for t in texts(request)) == 1, texts(request)
    assert record.result is not None and "sum=5" in (record.result.text or "")


def test_transcripts_of_a_finished_conversation_expire(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    workers(session_ttl_s=3)
    job = client.submit(prompt="[[sim: text hi]] remember this", conversation=f"ttl-{unique}")
    assert wait(client, job.id).status == "succeeded"

    def session_keys() -> list[bytes]:
        found = [*redis_client.scan_iter(match=f"{settings.key_prefix}session*", count=1000)]
        return [*found, *redis_client.scan_iter(match=f"{settings.key_prefix}conv*", count=1000)]

    assert any(b":main" in k for k in session_keys())
    deadline = time.monotonic() + 15
    while session_keys() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert session_keys() == []


def test_a_later_turn_claimed_first_waits_for_the_earlier_one_past_a_500_job_backlog(
    workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    # A producer that also routes to a queue no worker here consumes: 600 jobs wait there, older than both turns.
    idle = f"{settings.queue}-idle"
    producer = Client(settings.model_copy(update={"queues": [settings.queue, idle]}), redis_client=redis_client)
    try:
        producer.submit_many([{"prompt": f"elsewhere {i}", "queue": idle} for i in range(600)])
        first = producer.submit(prompt=f"[[sim: text one]] turn one {unique}", conversation=unique, priority=9)
        second = producer.submit(prompt=f"[[sim: text two]] turn two {unique}", conversation=unique, priority=0)
        workers(concurrency=1)  # priority 0 first: the later turn is claimed before the earlier one
        one, two = wait(producer, first.id), wait(producer, second.id)
        assert (one.status, two.status) == ("succeeded", "succeeded"), (one.error, two.error)
        assert one.finished_at is not None and two.attempts[0].started_at is not None
        assert one.finished_at <= two.attempts[0].started_at
        assert any(e.type == "deferred" and first.id in e.data["reason"] for e in events(producer, second.id))
        info = ConversationStore.from_settings(settings, redis_client).info(unique)
        assert info is not None and [t.job_id for t in info.turns] == [first.id, second.id]
    finally:
        for key in redis_client.scan_iter(match=f"{idle}*", count=1000):
            redis_client.delete(key)


def test_a_forked_turn_never_moves_the_pointer_even_once_its_events_are_trimmed(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    policy = settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})
    workers(policy=policy, events_maxlen=10)  # a stream capped near 10 events: its first ones go early
    name = f"fork-{unique}"
    base = wait(client, client.submit(prompt="[[sim: text base]] start", conversation=name).id)
    assert base.status == "succeeded", base.error
    calls = " ".join(f'[[sim: tool mcp__claudeq__add {{"a": {i}, "b": 1}}]]' for i in range(60))
    fork = client.submit(prompt=f"{calls} branch off {unique}", mcp_tools=["add"], conversation=name, fork=True)
    forked = wait(client, fork.id, timeout=180)
    assert forked.status == "succeeded", forked.error
    assert not any(e.type == "session_plan" for e in events(client, fork.id))  # trimmed away with the early events
    assert forked.session_id and forked.session_id != base.session_id

    conversations = ConversationStore.from_settings(settings, redis_client)
    assert run_call(conversations.latest_session_call(name)) == base.session_id  # a fork branches: the pointer stays
    info = conversations.info(name)
    assert info is not None and [(t.job_id, t.forked, t.resumed_from) for t in info.turns] == [
        (base.id, False, None),
        (fork.id, True, base.session_id),
    ]
    assert client.get(fork.id).public()["session_plan"]["mode"] == "fork"


def test_a_conversation_is_its_tenants_own(
    client: Client, workers: WorkerFactory, simulator: Any, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    workers()
    name = f"shared-name-{unique}"
    secret, injected = f"A-PRIVATE-{unique}", f"B-INJECTED-{unique}"
    a1 = wait(client, client.submit(prompt=f"[[sim: text noted]] {secret}", conversation=name, tenant="team-a").id)
    assert a1.status == "succeeded", a1.error
    # Tenant B names A's conversation: it starts a conversation of its own, and its request carries nothing of A's.
    b1 = wait(client, client.submit(prompt=f"[[sim: text ok]] {injected}", conversation=name, tenant="team-b").id)
    assert b1.status == "succeeded", b1.error
    assert b1.session_id and b1.session_id != a1.session_id
    b_said = [t for request in main_requests(simulator, b1.session_id) for t in texts(request)]
    assert any(injected in t for t in b_said) and not any(secret in t or "noted" in t for t in b_said)
    plan = next(e for e in events(client, b1.id) if e.type == "session_plan")
    assert plan.data["mode"] == "new" and plan.data["resume"] is None
    conversations = ConversationStore.from_settings(settings, redis_client)
    assert run_call(conversations.latest_session_call(name, "team-a")) == a1.session_id  # B did not move A's pointer
    assert run_call(conversations.latest_session_call(name, "team-b")) == b1.session_id
    assert run_call(conversations.latest_session_call(name)) is None  # nor is anything of it the default tenant's
    # A's next turn carries A's first turn and none of B's text.
    a2 = wait(client, client.submit(prompt="[[sim: text again]] second", conversation=name, tenant="team-a").id)
    assert a2.status == "succeeded", a2.error
    assert a2.session_id is not None
    a_said = texts(main_requests(simulator, a2.session_id)[-1])
    assert any(secret in t for t in a_said) and not any(injected in t for t in a_said)


def test_a_session_another_tenants_job_created_cannot_be_resumed(
    client: Client, workers: WorkerFactory, simulator: Any, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    workers()
    injected = f"B-INJECTED-{unique}"
    a1 = wait(client, client.submit(prompt=f"[[sim: text noted]] A-PRIVATE-{unique}", tenant="team-a").id)
    b1 = wait(client, client.submit(prompt="[[sim: text ok]] b's own", tenant="team-b").id)
    assert (a1.status, b1.status) == ("succeeded", "succeeded"), (a1.error, b1.error)
    # Refused at submit, naming the field, and no job; B's session is no more the default tenant's than A's is B's.
    for tenant, session in (("team-b", a1.session_id), ("default", b1.session_id)):
        assert session is not None
        with pytest.raises(JobSpecError) as refused:
            client.submit(prompt=f"{injected} via resume", resume=session, tenant=tenant)
        assert [field for field, _ in refused.value.errors] == ["resume"]
        assert a1.id not in str(refused.value) and b1.id not in str(refused.value)
    # A record written past the producer's check fails at run time, before any request is made.
    sneaked = JobRecord(
        id=new_job_id(),
        spec=JobSpec(prompt=f"{injected} sneaked", resume=a1.session_id, tenant="team-b"),
        status="queued",
        created_at=utcnow(),
    )
    before = len(simulator.requests())
    run_call(client.store.create_call(sneaked))
    push_run(redis_client, settings.queue, sneaked.id)
    failed = wait(client, sneaked.id)
    assert failed.status == "failed" and failed.error is not None and failed.error.kind == "input"
    assert failed.error.message.startswith("resume: ") and a1.id not in failed.error.message
    assert not any(injected in t for r in simulator.requests()[before:] for t in texts(r) if "messages" in r)
    # A's own jobs still resume A's session.
    own = wait(client, client.submit(prompt="[[sim: text mine]] resume mine", resume=a1.session_id, tenant="team-a").id)
    assert own.status == "succeeded", own.error


def test_a_one_shot_jobs_transcript_goes_at_its_success_when_the_operator_says_so(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    workers(oneshot_session_ttl_s=0)
    one_shot = wait(client, client.submit(prompt=f"[[sim: text done]] once {unique}").id)
    turn = wait(client, client.submit(prompt=f"[[sim: text hi]] keep {unique}", conversation=f"keep-{unique}").id)
    assert one_shot.status == turn.status == "succeeded"
    assert one_shot.session_id and turn.session_id

    def stored(session_id: str) -> list[bytes]:
        return [*redis_client.scan_iter(match=f"{settings.key_prefix}session*{session_id}*", count=1000)]

    deadline = time.monotonic() + 10
    while stored(one_shot.session_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stored(one_shot.session_id) == []
    assert any(k.endswith(b":main") for k in stored(turn.session_id))  # a conversation keeps what it resumes
    # The next turn resumes the kept session; the one-shot job's record still says what it answered.
    nxt = wait(client, client.submit(prompt=f"again {unique}", conversation=f"keep-{unique}").id)
    assert nxt.status == "succeeded", nxt.error
    assert one_shot.result is not None and client.get(one_shot.id).result == one_shot.result
