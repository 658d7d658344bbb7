"""The events of a job's stream: one data model per event type, the stored form as before, typed reads back."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from claudeq.events import (
    EVENT_DATA,
    Claimed,
    RetryScheduled,
    SessionStarted,
    ToolResult,
    data_of,
    ended,
    session_of,
)
from claudeq.jobs import encode_event
from claudeq.models import Event, EventType, JobError

ROOT = Path(__file__).resolve().parents[2]


def stored(event: Event) -> dict[str, object]:
    form = json.loads(encode_event(event))
    form.pop("at")
    return form


def test_every_event_type_has_its_data_model() -> None:
    assert set(EVENT_DATA) == set(get_args(EventType))
    assert all(model.event_type == kind for kind, model in EVENT_DATA.items())


def test_the_stored_form_is_the_fields_the_emitter_set() -> None:
    assert stored(Claimed(worker="w1", attempt=2).event(2)) == {
        "type": "claimed",
        "attempt": 2,
        "data": {"worker": "w1", "attempt": 2},
    }
    # A field at its default that the emitter did not set is not written; one it set to None is.
    assert stored(ToolResult(id="t", is_error=False, text="ok").event(1))["data"] == {
        "id": "t",
        "is_error": False,
        "text": "ok",
    }
    assert stored(ToolResult(id="t", is_error=False, text="ok", chars=None).event(1))["data"] == {
        "id": "t",
        "is_error": False,
        "text": "ok",
        "chars": None,
    }
    assert stored(ended("succeeded")) == {"type": "succeeded"}
    failed = ended("failed", JobError(kind="input", message="no prompt"), attempt=3)
    assert stored(failed) == {"type": "failed", "attempt": 3, "data": {"kind": "input", "message": "no prompt"}}


def test_an_emitter_cannot_leave_out_or_mistype_a_field() -> None:
    with pytest.raises(ValidationError, match="attempt"):
        Claimed(worker="w1")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="wait_s"):
        RetryScheduled(reason="transient", wait_s="soon", next_attempt=2, in_place=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has an error"):
        ended("failed")


def test_a_stored_event_reads_back_typed_and_keeps_what_a_newer_version_added() -> None:
    text = '{"type":"retry","at":"2026-12-07T05:00:00Z","data":{"reason":"transient","wait_s":1.5,'
    text += '"next_attempt":2,"in_place":false,"jitter":0.2}}'
    event = Event.model_validate_json(text)
    data = data_of(event)
    assert isinstance(data, RetryScheduled)
    assert (data.reason, data.wait_s, data.next_attempt, data.in_place) == ("transient", 1.5, 2, False)
    assert data.model_extra == {"jitter": 0.2} and event.data["jitter"] == 0.2
    assert stored(data.event())["data"] == event.data  # passed on as it came


def test_an_entry_that_does_not_fit_its_model_still_reads_and_types_as_none() -> None:
    event = Event.model_validate_json('{"type":"claimed","at":"2026-12-07T05:00:00Z","data":{"worker":"w"}}')
    assert event.data == {"worker": "w"} and data_of(event) is None
    assert session_of(Event(type="session", data={"session_id": 7})) is None
    assert session_of(SessionStarted(session_id="s-1").event(1)) == "s-1"
    assert session_of(Claimed(worker="w", attempt=1).event(1)) is None


def test_no_module_builds_an_event_but_from_its_model() -> None:
    """Every `Event(...)` of claudeq with a `type` is built in claudeq/events.py: elsewhere, events come from their
    type's model (`Model(...).event()`, `ended(...)`), so none can carry data its type does not have."""
    found = []
    for path in sorted((ROOT / "claudeq").rglob("*.py")) + sorted(
        p for d in ("worker", "producer") for p in (ROOT / d).rglob("*.py")
    ):
        if path.name == "events.py" and path.parent.name == "claudeq":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Event"
                and any(k.arg == "type" for k in node.keywords)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_every_model_is_listed_with_its_fields_in_the_docs() -> None:
    docs = (ROOT / "docs" / "jobs.md").read_text()
    for kind, model in EVENT_DATA.items():
        assert f"| `{kind}` | `{model.__name__}` |" in docs
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{kind}` |"))
        assert all(f"`{name}`" in row for name in model.model_fields), row
