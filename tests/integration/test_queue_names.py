"""`spec.queue` becomes a Redis list key on the broker: only configured queue names are accepted, at submit, with
the field, so a job can neither push a Celery message into one of claudeq's own keys nor hit WRONGTYPE after its
record was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from claudeq.broker import pending_job_ids
from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore, Turn
from claudeq.errors import JobSpecError
from claudeq.keys import Keys
from claudeq.models import utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.conftest import make_settings

pytestmark = pytest.mark.integration


def _refused_queue(client: Client, queue: str) -> JobSpecError:
    with pytest.raises(JobSpecError) as info:
        client.submit(prompt="hi", queue=queue)
    assert [field for field, _ in info.value.errors] == ["queue"]
    return info.value


def test_queue_naming_a_conversation_turn_list_is_refused(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    conversations = ConversationStore.from_settings(settings, redis_client)
    run_call(conversations.record_turn_call("chat", Turn(job_id="j1", status="succeeded", finished_at=utcnow()), True))

    error = _refused_queue(client, keys.conversation_turns("chat"))

    assert "not a configured queue" in str(error)
    assert redis_client.llen(keys.conversation_turns("chat")) == 1  # nothing pushed into the turn list
    info = conversations.info("chat")  # `conversation show` still reads it
    assert info is not None and [t.job_id for t in info.turns] == ["j1"]
    assert client.list() == []  # no record written


def test_queue_naming_a_hash_is_refused_before_anything_is_written(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    existing = client.submit(prompt="an ordinary job")
    job_key = Keys(settings.key_prefix).job(existing.id)  # a hash: LPUSH on it is WRONGTYPE

    _refused_queue(client, job_key)

    assert [r.id for r in client.list()] == [existing.id]  # no half-submitted job left queued forever
    assert redis_client.type(job_key) == b"hash"


def test_unconsumed_queue_is_refused(client: Client) -> None:
    error = _refused_queue(client, "nobody-consumes-this")
    assert client.settings.queue in str(error)  # the reason lists what is allowed


def test_configured_queues_are_accepted(redis_url: str, unique: str, redis_client: redis.Redis) -> None:
    fast = f"claudeq-test-{unique}-fast"
    settings = make_settings(redis_url, unique, queues=[f"claudeq-test-{unique}", fast])
    client = Client(settings, redis_client=redis_client)
    try:
        default = client.submit(prompt="default queue")
        routed = client.submit(prompt="fast queue", queue=fast)
        assert pending_job_ids(redis_client, [settings.queue]) == {default.id}
        assert pending_job_ids(redis_client, [fast]) == {routed.id}
    finally:
        redis_client.delete(fast)


def test_cli_submit_refuses_an_unknown_queue_naming_the_field(settings: Settings, client: Client) -> None:
    env = {
        **os.environ,
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
    }
    done = subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", "submit", "hi", "--queue", f"{settings.key_prefix}jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "queue" in done.stderr and "not a configured queue" in done.stderr
    assert client.list() == []
