"""Bad input is refused at submit with the field and the reason, and nothing is written or enqueued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from claudeq.broker import job_id_of, queue_lists
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import JobSpecError
from claudeq.producer.client import Client
from claudeq.producer.validation import validate_spec


class RecordingCelery:
    """Stands in for the broker in unit tests: records what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, **kwargs: Any) -> None:
        self.sent.append({"name": name, **kwargs})


@pytest.fixture
def celery() -> RecordingCelery:
    return RecordingCelery()


@pytest.fixture
def unit_client(fake_settings: Settings, fake_redis: fakeredis.FakeRedis, celery: RecordingCelery) -> Client:
    return Client(fake_settings, redis_client=fake_redis, celery_app=celery)


def _refused(client: Client, **fields: Any) -> JobSpecError:
    with pytest.raises(JobSpecError) as info:
        client.submit(**fields)
    return info.value


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"prompt": ""}, "prompt", "at least 1 character"),
        ({"prompt": "   "}, "prompt", "must not be blank"),
        ({"prompt": "hi", "colour": "red"}, "colour", "unknown field"),
        ({"prompt": "hi", "max_budget_usd": -1}, "max_budget_usd", "greater than 0"),
        ({"prompt": "hi", "max_turns": 0}, "max_turns", "greater than or equal to 1"),
        ({"prompt": "hi", "cwd": "/etc"}, "cwd", "outside the workspace roots"),
        ({"prompt": "hi", "cwd": "relative/dir"}, "cwd", "absolute path"),
        ({"prompt": "hi", "output_schema": {"type": "object", "properties": 3}}, "output_schema", "JSON schema"),
        ({"prompt": "hi", "output_schema": {"type": "array"}}, "output_schema", "must be an object"),
        ({"prompt": "hi", "tools": "everything"}, "tools", "unknown tool profile"),
        ({"prompt": "hi", "tools": ["Bash"]}, "tools", "Bash not allowed"),
        ({"prompt": "hi", "permission_mode": "bypassPermissions"}, "permission_mode", "not allowed"),
        ({"prompt": "hi", "priority": 12}, "priority", "less than or equal to 9"),
        ({"prompt": "hi", "fork": True}, "spec", "fork needs a conversation"),
        ({"prompt": "hi", "deadline_s": 10**9}, "deadline_s", "maximum"),
        ({"prompt": "hi", "workspace": {"repo": "/etc/repo"}}, "workspace.repo", "outside the workspace roots"),
        ({"prompt": "hi", "workspace": {"repo": "rel"}}, "workspace.repo", "absolute path"),
        ({"prompt": "hi", "workspace": {"repo": "/r", "ref": "--upload-pack=x"}}, "workspace.ref", "not a git ref"),
        ({"prompt": "hi", "workspace": {"repo": "/r", "branch": "a..b"}}, "workspace.branch", "not a git ref"),
        ({"prompt": "hi", "workspace": {"repo": "/r", "colour": 1}}, "workspace.colour", "unknown field"),
        ({"prompt": "hi", "concurrency_key": ""}, "concurrency_key", "at least 1 character"),
        ({"prompt": "hi", "concurrency_limit": 0}, "concurrency_limit", "greater than or equal to 1"),
        ({"prompt": "hi", "concurrency_limit": 3}, "concurrency_limit", "needs a concurrency_key"),
    ],
)
def test_bad_spec_is_refused_with_field_and_reason(
    unit_client: Client, celery: RecordingCelery, fields: dict[str, Any], field: str, reason: str
) -> None:
    error = _refused(unit_client, **fields)
    assert any(f == field and reason in r for f, r in error.errors), error.errors
    assert celery.sent == []
    assert unit_client.store.redis.keys("*") == []


def test_a_10_mb_prompt_is_refused(unit_client: Client, celery: RecordingCelery) -> None:
    error = _refused(unit_client, prompt="x" * 10_000_000)
    assert error.field == "prompt"
    assert "limit is 1000000" in error.errors[0][1]
    assert celery.sent == []
    assert unit_client.store.redis.keys("*") == []


def test_prompt_limit_is_configurable(fake_redis: fakeredis.FakeRedis, celery: RecordingCelery) -> None:
    settings = Settings(_env_file=None, max_prompt_bytes=5)  # type: ignore[call-arg]
    client = Client(settings, redis_client=fake_redis, celery_app=celery)
    assert _refused(client, prompt="123456").field == "prompt"


def test_cwd_under_a_workspace_root_is_accepted(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, policy=WorkerPolicy(workspace_roots=[tmp_path]))  # type: ignore[call-arg]
    spec = validate_spec({"prompt": "hi", "cwd": str(tmp_path / "sub")}, settings)
    assert spec.cwd == str(tmp_path / "sub")
    with pytest.raises(JobSpecError):
        validate_spec({"prompt": "hi", "cwd": str(tmp_path) + "-sibling"}, settings)
    with pytest.raises(JobSpecError):
        validate_spec({"prompt": "hi", "cwd": str(tmp_path / ".." / "escape")}, settings)


def _broker_messages(client: Client) -> list[dict[str, Any]]:
    """The claudeq.run messages waiting in every broker list of the client's queue, oldest first."""
    found = []
    for name in queue_lists(client.settings.queue):
        for raw in reversed(client.store.redis.lrange(name, 0, -1)):
            message = json.loads(raw)
            found.append({"list": name, **message})
    return found


def test_a_good_spec_is_written_and_sent(unit_client: Client, celery: RecordingCelery) -> None:
    handle = unit_client.submit(prompt="hello", priority=3, metadata={"team": "a"})
    record = unit_client.get(handle.id)
    assert record.status == "queued"
    assert record.spec.metadata == {"team": "a"}
    [sent] = _broker_messages(unit_client)
    assert sent["headers"]["task"] == "claudeq.run"
    assert job_id_of(json.dumps(sent)) == handle.id
    assert sent["properties"]["delivery_info"]["routing_key"] == unit_client.settings.queue
    assert sent["properties"]["priority"] == 3
    assert sent["list"] == f"{unit_client.settings.queue}\x06\x163"  # kombu's list for priority step 3
    assert celery.sent == []  # pushed directly, not through send_task


def test_idempotent_submit_enqueues_one_message(unit_client: Client, celery: RecordingCelery) -> None:
    first = unit_client.submit(prompt="hello", idempotency_key="order-42")
    second = unit_client.submit(prompt="hello", idempotency_key="order-42")
    assert first.id == second.id
    assert (first.created, second.created) == (True, False)
    assert len(_broker_messages(unit_client)) == 1


@given(st.text(min_size=1, max_size=200).filter(lambda s: s.strip() != ""))
def test_any_non_blank_prompt_is_accepted(prompt: str) -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert validate_spec({"prompt": prompt}, settings).prompt == prompt
