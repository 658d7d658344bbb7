"""A job's run drawn with time across (docs/web.md#the-timeline): what `_timeline.html` renders as SVG.

Lane 0 holds the waits — in the queue before the first attempt, before each retry (its backoff), deferrals
(no account or slot free, a rate limit's reset, a budget) — and one lane per attempt holds its bar (account,
worker, outcome) with its tool calls and rate-limit signals as marks. A line marks the end. Everything comes from
the record and its events; while the job runs the right edge is now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from claudeq.models import Event, JobRecord

#: The drawing's geometry (SVG user units; the SVG scales to the page's width).
WIDTH = 1000.0
LABEL_W = 190.0
PLOT_W = WIDTH - LABEL_W - 20.0
LANE_H = 26.0
TOP = 22.0  # room for the time ticks
BAR_H = 14.0
#: Longest text in a hover title.
TITLE_TEXT = 300


@dataclass(frozen=True)
class Bar:
    """A span: a wait (`queue`, `retry`, `deferred`, `requeued`) or an attempt (its outcome as `state`)."""

    kind: str
    x: float
    y: float
    w: float
    title: str
    attempt: int | None = None
    state: str = ""


@dataclass(frozen=True)
class Mark:
    """A moment on an attempt's lane: a `tool` call or a `rate_limit` signal."""

    kind: str
    x: float
    y: float
    title: str
    attempt: int


@dataclass
class Drawing:
    """What the template draws: lanes (label, y), bars, marks, time ticks and the end line (None while running)."""

    width: float
    height: float
    lanes: list[tuple[str, float]] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    end: tuple[float, str] | None = None
    span_s: float = 0.0


def _short(text: str, limit: int = TITLE_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def draw(record: JobRecord, events: list[Event], now: datetime) -> Drawing:
    """The timeline of `record` from its events (in stream order), up to its end or `now`."""
    start = record.created_at
    stop = record.finished_at or max(now, start)
    span = max((stop - start).total_seconds(), 0.001)
    attempts = record.attempts

    def x(at: datetime) -> float:
        offset = min(max((at - start).total_seconds(), 0.0), span)
        return round(LABEL_W + offset / span * PLOT_W, 2)

    def lane(index: int) -> float:
        return TOP + index * LANE_H

    drawing = Drawing(width=WIDTH, height=TOP + (len(attempts) + 1) * LANE_H + 6, span_s=span)
    drawing.lanes.append(("waiting", lane(0)))
    retries = {e.data.get("next_attempt"): e for e in events if e.type == "retry"}
    deferrals = {e.attempt: e for e in events if e.type == "deferred"}
    requeues = {e.attempt: e for e in events if e.type == "requeued"}

    def wait(kind: str, begin: datetime, end: datetime, why: str) -> None:
        if end <= begin:
            return
        took = _seconds((end - begin).total_seconds())
        drawing.bars.append(Bar(kind, x(begin), lane(0), max(x(end) - x(begin), 1.0), f"{why} ({took})"))

    first = attempts[0].started_at if attempts else stop
    wait("queue", start, first, "queued, waiting for a worker")
    for i, a in enumerate(attempts):
        y = lane(i + 1)
        label = f"#{a.number} {a.account or '?'}" + (f" · {a.worker}" if a.worker else "")
        drawing.lanes.append((label, y))
        end = a.finished_at or stop
        outcome = a.outcome or ("running" if a.finished_at is None else "ended")
        usage = a.usage
        cost = f", ${usage.cost_usd:.4f}" if usage else ""
        detail = f": {_short(a.detail, 160)}" if a.detail and a.detail != a.outcome else ""
        title = f"attempt {a.number} on {a.account or '?'} ({a.worker or '?'}): {outcome}{detail}, " + _seconds(
            (end - a.started_at).total_seconds()
        )
        drawing.bars.append(
            Bar("attempt", x(a.started_at), y, max(x(end) - x(a.started_at), 1.0), title + cost, a.number, outcome)
        )
        after = attempts[i + 1].started_at if i + 1 < len(attempts) else (stop if not record.finished else None)
        if a.finished_at is not None and after is not None:
            retry, deferral, requeue = retries.get(a.number + 1), deferrals.get(a.number), requeues.get(a.number)
            if retry is not None:
                where = "in place" if retry.data.get("in_place") else "requeued"
                why = f"retry after {retry.data.get('reason', '?')}, backoff {retry.data.get('wait_s', '?')} s, {where}"
                wait("retry", a.finished_at, after, why)
            elif deferral is not None:
                why = f"deferred until {deferral.data.get('ready_at', '?')}: {deferral.data.get('reason', '')}"
                wait("deferred", a.finished_at, after, _short(why))
            elif requeue is not None:
                wait("requeued", a.finished_at, after, _short(f"requeued: {requeue.data.get('reason', '')}"))
            else:
                wait("queue", a.finished_at, after, "back in the queue")
    lanes = {a.number: lane(i + 1) for i, a in enumerate(attempts)}
    for event in events:
        y_attempt = lanes.get(event.attempt or 0)
        if y_attempt is None:
            continue
        if event.type == "tool_call":
            given = event.data.get("input", "")
            what = given if isinstance(given, str) else json.dumps(given, ensure_ascii=False)
            title = f"{event.at:%H:%M:%S} tool call {event.data.get('tool', '?')} {_short(what, 200)}"
            drawing.marks.append(Mark("tool", x(event.at), y_attempt, title, event.attempt or 0))
        elif event.type == "rate_limit" and event.data.get("status") != "allowed":
            title = f"{event.at:%H:%M:%S} rate limit {event.data.get('status', '?')} on {event.data.get('window', '?')}"
            if event.data.get("resets_at"):
                title += f", resets {event.data['resets_at']}"
            drawing.marks.append(Mark("rate_limit", x(event.at), y_attempt, title, event.attempt or 0))
    if record.finished_at is not None:
        drawing.end = (x(record.finished_at), f"{record.status} at {record.finished_at:%H:%M:%S} UTC")
    for step in range(5):
        drawing.ticks.append((round(LABEL_W + step / 4 * PLOT_W, 2), "+" + _seconds(span * step / 4)))
    return drawing
