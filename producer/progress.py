"""One-line, human descriptions of job events: `submit --wait`, `events --follow`, `wait_job` progress, the demo.

Every line is built from an event's public data (already redacted by the worker), never from anything else.
"""

from __future__ import annotations

import json
from typing import Any

from claudeq.models import Event

#: Longest piece of free text (assistant text, tool input or result) shown on one line.
LINE_TEXT = 160


def _one_line(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return " ".join(text.split())


def describe(event: Event, whole: bool = False) -> str | None:
    """A short sentence for `event`, or None for events that only matter to machines. Free text is cut to a line's
    length unless `whole` (output that is not a terminal's: every character kept, on one line)."""

    def _clip(value: Any, limit: int = LINE_TEXT) -> str:
        text = _one_line(value)
        return text if whole or len(text) <= limit else text[: limit - 1] + "…"

    d = event.data
    kind = event.type
    if kind == "submitted":
        return f"queued on {d.get('queue', '?')}"
    if kind == "claimed":
        return f"picked up by {d.get('worker', '?')} (attempt {d.get('attempt', '?')})"
    if kind == "run_started":
        model = f", model {d['model']}" if d.get("model") else ""
        warm = " (warm CLI)" if d.get("warm") else ""
        return f"running on account {d.get('account', '?')}{model}{warm}"
    if kind == "assistant_text":
        return f"assistant: {_clip(d.get('text', ''))}"
    if kind == "tool_call":
        return f"tool call {d.get('tool', '?')} {_clip(d.get('input', ''), 100)}"
    if kind == "tool_result":
        marker = "tool error" if d.get("is_error") else "tool result"
        return f"{marker}: {_clip(d.get('text', ''), 100)}"
    if kind == "rate_limit":
        if d.get("status") == "allowed":
            return None  # every admitted request says so
        util = d.get("utilization")
        detail = f" utilization {util:.2f}" if isinstance(util, int | float) else ""
        resets = f", resets {d['resets_at']}" if d.get("resets_at") else ""
        return f"rate limit {d.get('status', '?')} on window {d.get('window') or '?'}{detail}{resets}"
    if kind == "result":
        cost = d.get("cost_usd")
        money = f", ${cost:.6f}" if isinstance(cost, int | float) else ""
        state = "error" if d.get("is_error") else "ok"
        return f"run finished ({state}, {d.get('num_turns', '?')} turns{money})"
    if kind == "attempt_finished":
        detail = f": {_clip(d['detail'], 120)}" if d.get("detail") and d["detail"] != d.get("outcome") else ""
        return f"attempt ended {d.get('outcome', '?')}{detail}"
    if kind == "retry":
        where = "in place" if d.get("in_place") else "requeued"
        wait = d.get("wait_s", "?")
        return f"retrying ({d.get('reason', '?')}) in {wait} s, {where}, attempt {d.get('next_attempt')}"
    if kind == "deferred":
        return f"waiting until {d.get('ready_at', '?')} ({_one_line(d.get('reason', ''))})"  # a reason is read whole
    if kind == "requeued":
        return f"requeued ({_one_line(d.get('reason', ''))})"
    if kind in ("succeeded", "failed", "cancelled"):
        detail = f": {_clip(d['message'], 160)}" if d.get("message") else ""
        return f"{kind}{detail}"
    if kind == "session_restarted":
        return "session restarted (the old one was missing)"
    if kind == "approval_requested":
        call = f"{d.get('tool', '?')} {_clip(d.get('input', ''), 100)}"
        return f"waiting for approval of {call} ({d.get('request_id', '?')})"
    if kind == "approval_decided":
        verb = "approved" if d.get("approve") else "denied"
        why = f": {_clip(d['reason'], 100)}" if d.get("reason") else ""
        return f"{verb} by {d.get('by', '?')} ({d.get('request_id', '?')}){why}"
    return None


def line(event: Event, whole: bool = False, every: bool = False) -> str | None:
    """`describe(event, whole)` after the time and the attempt number: `21:14:05 #1 tool call Glob {…}`; None for an
    event only machines read, unless `every` (then its type and data: `21:14:05 #1 session session_id=…`)."""
    text = describe(event, whole)
    if text is None:
        if not every:
            return None
        text = " ".join([event.type, *(f"{k}={_one_line(v)}" for k, v in event.data.items())])
    attempt = f" #{event.attempt}" if event.attempt else ""
    return f"{event.at.strftime('%H:%M:%S')}{attempt} {text}"
