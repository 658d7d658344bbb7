"""JobStore (claudeq/jobs/_store.py) on fakeredis: create, idempotency, cancel, events, unreadable records."""

from __future__ import annotations

import json

import fakeredis
import pytest

from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.jobs import JobStore, encode_event, encode_fields, parse_record
from claudeq.models import Attempt, Event, JobRecord, JobResult, JobSpec, Usage, utcnow
from claudeq.script_calls import run_call
from tests.support.jobs import queued, queued_record


def test_create_writes_a_queued_record_and_indexes_it(fake_store: JobStore) -> None:
    job_id = queued(fake_store, "j1")
    record = run_call(fake_store.get_call(job_id))
    assert record.status == "queued"
    assert record.spec.prompt == "hi"
    assert fake_store.redis.zscore(fake_store.keys.jobs, job_id) is not None
    assert fake_store.redis.zscore(fake_store.keys.queued, job_id) is not None


def test_same_idempotency_key_returns_the_same_job(fake_store: JobStore) -> None:
    first, created1 = run_call(fake_store.create_call(queued_record("a", idempotency_key="k")))
    second, created2 = run_call(fake_store.create_call(queued_record("b", idempotency_key="k")))
    assert (first, created1) == ("a", True)
    assert (second, created2) == ("a", False)
    assert not fake_store.redis.exists(fake_store.keys.job("b"))


def test_idempotency_key_of_an_expired_job_makes_a_new_job(fake_store: JobStore) -> None:
    run_call(fake_store.create_call(queued_record("a", idempotency_key="k")))
    fake_store.redis.delete(fake_store.keys.job("a"))
    job_id, created = run_call(fake_store.create_call(queued_record("b", idempotency_key="k")))
    assert (job_id, created) == ("b", True)


def test_cancel_of_unknown_job_says_missing(fake_store: JobStore) -> None:
    assert fake_store.cancel("nope") == "missing"


def test_event_stream_is_trimmed(fake_redis: fakeredis.FakeRedis, fake_store: JobStore) -> None:
    store = JobStore(fake_redis, fake_store.keys, result_ttl_s=3600, events_maxlen=10)
    job_id = queued(store)
    for i in range(200):
        store.append_event(job_id, Event(type="assistant_text", data={"i": i}))
    events = store.read_events(job_id)
    assert len(events) < 200
    assert events[-1][1].data == {"i": 199}


def test_read_events_after_an_id(fake_store: JobStore) -> None:
    job_id = queued(fake_store)
    first = fake_store.append_event(job_id, Event(type="claimed"))
    fake_store.append_event(job_id, Event(type="run_started"))
    assert [e.type for _, e in fake_store.read_events(job_id, after=first)] == ["run_started"]


def test_unreadable_record_is_reported_not_crashed_on(fake_store: JobStore) -> None:
    job_id = queued(fake_store)
    fake_store.redis.hset(fake_store.keys.job(job_id), "spec", '{"prompt": "x", "from_the_future": 1}')
    with pytest.raises(RecordUnreadable) as info:
        run_call(fake_store.get_call(job_id))
    assert info.value.job_id == job_id
    listed = fake_store.list_jobs()
    assert isinstance(listed[0], RecordUnreadable)


def test_get_unknown_job(fake_store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        run_call(fake_store.get_call("nope"))


def test_cancelling_a_waiting_job_expires_its_idempotency_key_with_it(fake_store: JobStore) -> None:
    job_id, _ = run_call(fake_store.create_call(queued_record("a", idempotency_key="k2")))
    assert fake_store.cancel(job_id) == "cancelled"
    assert 0 < fake_store.redis.ttl(fake_store.keys.idem("k2")) <= fake_store.result_ttl_s


def _finished_record() -> JobRecord:
    usage = Usage(input_tokens=1200, output_tokens=300, cost_usd=0.0093, model_usage={"m": {"inputTokens": 1200}})
    attempt = Attempt(
        number=1, account="a", worker="w1", outcome="success", session_id="s1", usage=usage, started_at=utcnow()
    )
    return JobRecord(
        id="old",
        spec=JobSpec(prompt="hi", metadata={"ticket": 7}, tools=["Read"], priority=3),
        status="succeeded",
        attempts=[attempt.model_copy(update={"finished_at": utcnow()})],
        account="a",
        worker="w1",
        session_id="s1",
        result=JobResult(text="done", num_turns=1, usage=usage),
        created_at=utcnow(),
        started_at=utcnow(),
        finished_at=utcnow(),
        fence=1,
    )


def test_records_and_events_written_by_the_older_encoding_read_the_same(fake_store: JobStore) -> None:
    """Before records were compacted, every document was spelled out in full (`json.dumps(model_dump(mode="json"))`,
    defaults, nulls and empty lists included) and events carried `"attempt": null, "data": {}`."""
    record = _finished_record()
    old_event = {"type": "claimed", "at": utcnow().isoformat(), "attempt": None, "data": {}}
    events = [["1-0", json.dumps(old_event)], ["2-0", json.dumps(Event(type="succeeded").model_dump(mode="json"))]]
    fake_store.redis.hset(
        fake_store.keys.job("old"),
        mapping={
            "status": "succeeded",
            "spec": json.dumps(record.spec.model_dump(mode="json")),
            "attempts": json.dumps([a.model_dump(mode="json") for a in record.attempts]),
            "result": json.dumps(record.result.model_dump(mode="json") if record.result else None),
            "error": "",
            "account": "a",
            "worker": "w1",
            "session_id": "s1",
            "created_at": record.created_at.isoformat(),
            "started_at": record.started_at.isoformat() if record.started_at else "",
            "finished_at": record.finished_at.isoformat() if record.finished_at else "",
            "fence": "1",
            "v": "1",
            "events": json.dumps(events),
        },
    )
    assert run_call(fake_store.get_call("old")) == record
    read = fake_store.read_events("old")
    assert [(entry_id, e.type, e.attempt, e.data) for entry_id, e in read[1:]] == [
        ("1-0", "claimed", None, {}),
        ("2-0", "succeeded", None, {}),
    ]


def test_the_compact_encoding_reads_back_as_the_same_record_and_is_smaller() -> None:
    record = _finished_record()
    fields = encode_fields({"spec": record.spec, "attempts": record.attempts, "result": record.result, "error": None})
    stored = dict(zip(fields[::2], fields[1::2], strict=True))
    assert "error" not in stored  # no value: no field
    full = json.dumps(record.spec.model_dump(mode="json"))
    assert len(stored["spec"]) < len(full) / 3
    base = {"status": "succeeded", "created_at": record.created_at.isoformat(), "fence": "1"}
    parsed = parse_record("old", {**base, **stored})
    assert (parsed.spec, parsed.attempts, parsed.result) == (record.spec, record.attempts, record.result)
    event = Event(type="claimed")
    assert Event.model_validate_json(encode_event(event)) == event
    assert "attempt" not in encode_event(event) and "data" not in encode_event(event)


def test_timestamps_are_stored_with_z_and_read_back_the_same(fake_store: JobStore) -> None:
    record = queued_record("tz")
    run_call(fake_store.create_call(record))
    raw = fake_store.redis.hget(fake_store.keys.job("tz"), "created_at")
    assert raw is not None and raw.decode().endswith("Z") and "+00:00" not in raw.decode()
    assert run_call(fake_store.get_call("tz")).created_at == record.created_at
