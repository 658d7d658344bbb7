"""Hostile job specs (hypothesis): any JSON object handed to `Client.submit`'s validation is either refused with
`JobSpecError` — every problem a (field, reason) pair, nothing written — or accepted; and an accepted spec comes
back from Redis exactly as it went in (written by the real CREATE script, read by the worker's store)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.jobs import JobStore
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.producer.client import new_job_id
from claudeq.producer.validation import validate_spec
from claudeq.script_calls import run_call

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)

#: Plausible values per field, mixed with anything at all.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "prompt": st.text(max_size=50),
    "model": st.sampled_from(["sonnet", "haiku", "claude-x", "", "opus"]),
    "max_turns": st.integers(-5, 2000),
    "max_budget_usd": st.floats(-1, 10) | st.just(float("nan")),
    "tools": st.sampled_from(["none", "read-only", "shell", "bogus"])
    | st.lists(st.sampled_from(["Read", "Bash", "X"])),
    "cwd": st.sampled_from(["/srv/work/x", "relative", "/etc", "/srv/work/../../etc"]),
    "priority": st.integers(-3, 12),
    "max_attempts": st.integers(-1, 30),
    "deadline_s": st.floats(-10, 1e9) | st.sampled_from([float("nan"), float("inf")]),
    "metadata": st.dictionaries(st.text(max_size=5), scalars, max_size=3),
    "idempotency_key": st.text(max_size=300),
    "conversation": st.text(max_size=250),
    "output_schema": st.sampled_from([{"type": "object"}, {"type": "nonsense"}, {"properties": 5}]),
    "permission_mode": st.sampled_from(["default", "bypassPermissions", "dontAsk", "nope"]),
    "queue": st.text(max_size=10),
    "effort": st.sampled_from(["low", "max", "extreme"]),
}
FIELDS = [*PLAUSIBLE, "system_prompt", "fork", "resume", "account", "add_dirs", "mcp_tools", "unknown_field"]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=7))
    spec: dict[str, Any] = {}
    for name in names:
        plausible = PLAUSIBLE.get(name)
        spec[name] = draw(plausible | json_values if plausible is not None else json_values)
    if draw(st.booleans()):
        spec["prompt"] = draw(st.text(min_size=1, max_size=40))
    return spec


@pytest.fixture
def store(redis_url: str, settings: Settings) -> Any:
    client = redis.Redis.from_url(redis_url)
    yield JobStore.for_settings(settings, client)
    for key in client.scan_iter(match=f"{settings.key_prefix}*", count=1000):
        client.delete(key)
    client.close()


@SETTINGS
@given(spec=specs())
def test_any_spec_is_refused_with_field_and_reason_or_stored_and_read_back_unchanged(
    spec: dict[str, Any], settings: Settings, store: JobStore
) -> None:
    refused: JobSpecError | None = None
    try:
        checked = validate_spec(spec, settings)
    except JobSpecError as exc:
        refused = exc
    if refused is not None:
        problems = refused.errors
        assert problems and all(isinstance(f, str) and isinstance(r, str) and r for f, r in problems), problems
        return
    assert isinstance(checked, JobSpec)
    job_id, created = run_call(
        store.create_call(JobRecord(id=new_job_id(), spec=checked, status="queued", created_at=utcnow()))
    )
    if created:
        assert run_call(store.get_call(job_id)).spec == checked
    else:
        # Hypothesis reuses values across examples: an idempotency key an earlier example stored gives that job back.
        assert checked.idempotency_key is not None
        assert run_call(store.get_call(job_id)).spec.idempotency_key == checked.idempotency_key
