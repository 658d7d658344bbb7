"""`claudeq top`'s token column for a running job: finished attempts plus the current one's latest figure."""

from __future__ import annotations

import fakeredis

from claudeq.keys import Keys
from claudeq.models import Attempt, Event, JobRecord, JobResult, JobSpec, Usage, utcnow
from claudeq.producer.top import _tokens_so_far


def record(job_id: str, attempts: int, done: Usage | None) -> JobRecord:
    return JobRecord(
        id=job_id,
        spec=JobSpec(prompt="p"),
        status="running",
        attempts=[Attempt(number=n, started_at=utcnow()) for n in range(1, attempts + 1)],
        result=JobResult(usage=done) if done else None,
        created_at=utcnow(),
    )


def add(r: fakeredis.FakeRedis, keys: Keys, job_id: str, event: Event) -> None:
    r.xadd(keys.events(job_id), {"event": event.model_dump_json()})


def test_running_job_tokens_are_its_finished_attempts_plus_the_latest_figure_of_the_current_one() -> None:
    r, keys = fakeredis.FakeRedis(), Keys("t:")
    add(
        r,
        keys,
        "j",
        Event(type="assistant_text", attempt=2, data={"text": "a", "tokens_so_far": {"input": 10, "output": 2}}),
    )
    add(
        r,
        keys,
        "j",
        Event(type="tool_call", attempt=2, data={"tool": "Read", "tokens_so_far": {"input": 50, "output": 9}}),
    )
    add(r, keys, "j", Event(type="tool_result", attempt=2, data={"text": "ok"}))
    earlier = Usage(input_tokens=100, cache_read_tokens=5, output_tokens=40)
    assert _tokens_so_far(r, keys, record("j", 2, earlier)) == (155, 49)


def test_a_figure_from_an_earlier_attempt_is_not_counted_twice() -> None:
    r, keys = fakeredis.FakeRedis(), Keys("t:")
    add(
        r,
        keys,
        "k",
        Event(type="assistant_text", attempt=1, data={"text": "a", "tokens_so_far": {"input": 10, "output": 2}}),
    )
    earlier = Usage(input_tokens=10, output_tokens=2)
    assert _tokens_so_far(r, keys, record("k", 2, earlier)) == (10, 2)
    assert _tokens_so_far(r, keys, record("none", 1, None)) == (0, 0)
