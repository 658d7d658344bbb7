"""producer/web/timeline.py: a job's record and events become the shapes its timeline draws, with plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from claudeq.models import Attempt, Event, JobRecord, JobSpec
from claudeq.producer.web.timeline import LABEL_W, PLOT_W, draw

T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(kind: str, seconds: float, attempt: int | None = None, **data: object) -> Event:
    return Event(type=kind, at=at(seconds), attempt=attempt, data=data)  # type: ignore[arg-type]


def test_a_deferral_a_rate_limit_and_a_tool_call_are_drawn_where_they_happened() -> None:
    record = JobRecord(
        id="j1",
        spec=JobSpec(prompt="p"),
        status="succeeded",
        created_at=T0,
        finished_at=at(100),
        attempts=[
            Attempt(number=1, account="a", worker="w1", outcome="rate_limited", started_at=at(10), finished_at=at(20)),
            Attempt(number=2, account="b", worker="w2", outcome="success", started_at=at(60), finished_at=at(100)),
        ],
    )
    events = [
        event("rate_limit", 19, 1, status="rejected", window="five_hour", resets_at="2026-12-07T12:01:00+00:00"),
        event("deferred", 20, 1, ready_at="2026-12-07T12:01:00+00:00", reason="no account free (1 cooling)"),
        event("tool_call", 80, 2, tool="Read", input='{"file_path": "a.md"}'),
    ]
    drawing = draw(record, events, now=at(500))

    def x(seconds: float) -> float:
        return round(LABEL_W + seconds / 100 * PLOT_W, 2)

    assert [(b.kind, b.x, b.attempt) for b in drawing.bars] == [
        ("queue", x(0), None),
        ("attempt", x(10), 1),
        ("deferred", x(20), None),
        ("attempt", x(60), 2),
    ]
    deferred = drawing.bars[2]
    assert deferred.w == x(60) - x(20) and "no account free (1 cooling)" in deferred.title
    assert [(m.kind, m.x, m.attempt) for m in drawing.marks] == [("rate_limit", x(19), 1), ("tool", x(80), 2)]
    assert "tool call Read" in drawing.marks[1].title and "a.md" in drawing.marks[1].title
    assert drawing.end == (x(100), "succeeded at 12:01:40 UTC")
    assert [label for label, _ in drawing.lanes] == ["waiting", "#1 a · w1", "#2 b · w2"]


def test_a_running_job_is_drawn_up_to_now_without_an_end() -> None:
    record = JobRecord(
        id="j2",
        spec=JobSpec(prompt="p"),
        status="running",
        created_at=T0,
        attempts=[Attempt(number=1, account="a", started_at=at(5))],
    )
    drawing = draw(record, [], now=at(20))
    attempt = drawing.bars[-1]
    assert attempt.state == "running" and attempt.x + attempt.w == LABEL_W + PLOT_W
    assert drawing.end is None and drawing.span_s == 20
