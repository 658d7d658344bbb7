"""`claudeq conversation show|delete|list` against a real Redis."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
import redis
import redis.asyncio as aioredis
from typer.testing import CliRunner

from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore, Turn
from claudeq.producer.cli_conversation import EXIT_NOT_FOUND, conversation_app
from claudeq.script_calls import run_call
from claudeq.transcripts import RedisSessionStore

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CLAUDEQ_KEY_PREFIX", settings.key_prefix)


async def _store_transcript(settings: Settings) -> None:
    sessions = RedisSessionStore.from_settings(settings, aioredis.Redis.from_url(settings.redis_url))
    await sessions.append({"project_key": "p", "session_id": "s1"}, [{"type": "user", "uuid": "u1"}])
    await sessions.aclose()


def test_show_then_delete_a_conversation(env: None, settings: Settings, redis_client: redis.Redis) -> None:
    # sync test: the CLI runs its own event loop
    convs = ConversationStore.from_settings(settings, redis_client)
    asyncio.run(_store_transcript(settings))
    run_call(
        convs.record_turn_call(
            "support-42", Turn(job_id="j1", status="succeeded", session_id="s1", finished_at=T0), True
        )
    )
    run_call(
        convs.record_turn_call(
            "support-42",
            Turn(job_id="j2", status="succeeded", session_id="s1", resumed_from="s1", finished_at=T0),
            True,
        )
    )
    runner = CliRunner()

    shown = runner.invoke(conversation_app, ["show", "support-42", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["session_id"] == "s1"
    assert [t["job_id"] for t in data["turns"]] == ["j1", "j2"]
    human = runner.invoke(conversation_app, ["show", "support-42"])
    assert "j2" in human.output and "resumed" in human.output
    assert json.loads(runner.invoke(conversation_app, ["list", "--json"]).output) == ["support-42"]

    deleted = runner.invoke(conversation_app, ["delete", "support-42", "--json"])
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.output)["sessions"] == ["s1"]
    assert redis_client.exists(convs.keys.session_entries("p", "s1")) == 0
    gone = runner.invoke(conversation_app, ["show", "support-42", "--json"])
    assert gone.exit_code == EXIT_NOT_FOUND
    assert "no conversation" in json.loads(gone.output)["error"]


def test_the_commands_look_in_one_tenants_conversations(
    env: None, settings: Settings, redis_client: redis.Redis
) -> None:
    convs = ConversationStore.from_settings(settings, redis_client)
    run_call(
        convs.record_turn_call(
            "chat", Turn(job_id="ja", status="succeeded", session_id="sa", finished_at=T0), True, "team-a"
        )
    )
    runner = CliRunner()
    assert runner.invoke(conversation_app, ["show", "chat", "--json"]).exit_code == EXIT_NOT_FOUND
    shown = runner.invoke(conversation_app, ["show", "chat", "--tenant", "team-a", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["session_id"] == "sa"
    assert json.loads(runner.invoke(conversation_app, ["list", "--json"]).output) == []
    assert json.loads(runner.invoke(conversation_app, ["list", "--tenant", "team-a", "--json"]).output) == ["chat"]
    assert runner.invoke(conversation_app, ["delete", "chat", "--tenant", "team-a"]).exit_code == 0
    assert convs.info("chat", "team-a") is None
