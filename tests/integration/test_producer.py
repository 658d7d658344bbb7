"""Submitting through the Client and the `claudeq` CLI writes the record and puts a real Celery message on the
real broker queue; refused specs write and send nothing."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.broker import pending_job_ids
from claudeq.config.settings import Settings
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.integration


def _broker_messages(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """Every message on the queue's Redis lists (kombu keeps a list per priority step)."""
    names = [name for name in client.keys(f"{queue}*") if name.decode().startswith(queue)]
    messages = []
    for name in names:
        messages += [json.loads(raw) for raw in client.lrange(name, 0, -1)]
    return messages


def _cli(settings: Settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **tree_env(),
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
    }
    return subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_client_submit_writes_record_and_enqueues_the_task(client: Client, redis_client: redis.Redis) -> None:
    handle = client.submit(prompt="write a haiku", model="haiku", priority=0)
    record = client.get(handle.id)
    assert record.status == "queued"
    assert record.spec.model == "haiku"
    messages = _broker_messages(redis_client, client.settings.queue)
    assert len(messages) == 1
    headers = messages[0]["headers"]
    assert headers["task"] == "claudeq.run"
    body = json.loads(base64.b64decode(messages[0]["body"]))
    assert body[0] == [handle.id]
    # The reconciler recognises the job's message in the real broker list (so it never re-sends a waiting job).
    assert pending_job_ids(redis_client, [client.settings.queue]) == {handle.id}
    assert [e.type for e in client.events(handle.id)] == ["submitted"]


def test_idempotent_submit_on_real_redis_sends_once(client: Client, redis_client: redis.Redis) -> None:
    a = client.submit(prompt="once", idempotency_key="nightly-report")
    b = client.submit(prompt="once", idempotency_key="nightly-report")
    assert a.id == b.id
    assert len(_broker_messages(redis_client, client.settings.queue)) == 1


def test_idempotency_keys_are_each_tenants_own(client: Client, redis_client: redis.Redis) -> None:
    # B submits with a key A used: B gets a job of its own, not A's id. And a key B squats first never swallows
    # A's later submit with it. One submit each way and one through submit_many (the batch path).
    a = client.submit(prompt="a's report", tenant="team-a", idempotency_key="nightly")
    b = client.submit(prompt="b's report", tenant="team-b", idempotency_key="nightly")
    assert b.created and b.id != a.id and client.get(b.id).spec.tenant == "team-b"
    squat = client.submit(prompt="b first", tenant="team-b", idempotency_key="squatted")
    [later] = client.submit_many([{"prompt": "a later", "tenant": "team-a", "idempotency_key": "squatted"}])
    assert later.created and later.id != squat.id and client.get(later.id).spec.prompt == "a later"
    # Within a tenant the key still gives the same job, and the default tenant keeps its key names.
    again = client.submit(prompt="a's report", tenant="team-a", idempotency_key="nightly")
    assert (again.id, again.created) == (a.id, False)
    plain = client.submit(prompt="default's", idempotency_key="nightly")
    assert plain.created and plain.id not in (a.id, b.id)
    assert redis_client.get(client.store.keys.prefix + "idem:nightly") == plain.id.encode()
    assert len(_broker_messages(redis_client, client.settings.queue)) == 5


def test_a_tenants_job_index_drops_expired_jobs_as_new_ones_come(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "team-a"\n')
    client = Client(settings.model_copy(update={"tenants_file": tenants}), redis_client=redis_client)
    keys, week_ago = client.store.keys, utcnow() - timedelta(seconds=client.settings.result_ttl_s + 60)
    spec = JobSpec(prompt="old", tenant="team-a")
    old = [JobRecord(id=f"old-{i}", spec=spec, status="queued", created_at=week_ago) for i in range(5)]
    for record in old:
        run_call(client.store.create_call(record, indexed=True))
    index = keys.tenant_index("team-a")
    assert redis_client.zcard(index) == 5
    redis_client.delete(*[keys.job(r.id) for r in old[1:]])  # four expired; old-0 still active past the retention
    # Each new entry looks at two of the oldest and takes out those whose record is gone (old-0 stays: active).
    new = client.submit(prompt="new", tenant="team-a").id
    assert redis_client.zcard(index) == 5 and redis_client.zscore(index, "old-1") is None
    new_many = [h.id for h in client.submit_many([{"prompt": "new", "tenant": "team-a"}] * 2)]  # the batch path
    assert {i.decode() for i in redis_client.zrange(index, 0, -1)} == {"old-0", new, *new_many}
    listed = [r.id for r in client.list(tenant="team-a") if isinstance(r, JobRecord)]
    assert set(listed[:2]) == set(new_many) and listed[2:] == [new, "old-0"]  # newest first (the batch: one time)


def test_cli_submit_then_status_json(settings: Settings, redis_client: redis.Redis, client: Client) -> None:
    done = _cli(settings, "submit", "-", "--model", "sonnet", "--meta", "ticket=42", "--json", stdin="from stdin")
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["id"]
    shown = _cli(settings, "status", job_id, "--json")
    assert shown.returncode == 0, shown.stderr
    public = json.loads(shown.stdout)
    assert public["id"] == job_id
    assert public["status"] == "queued"
    assert public["spec"]["prompt"] == "from stdin"
    assert public["spec"]["metadata"] == {"ticket": "42"}
    assert set(public) >= {"attempts", "result", "error", "created_at", "session_id", "ready_at"}
    assert public["created_at"].endswith("Z")
    messages = _broker_messages(redis_client, settings.queue)
    assert [m["headers"]["task"] for m in messages] == ["claudeq.run"]


def test_cli_refuses_bad_input_with_exit_2_and_writes_nothing(settings: Settings, redis_client: redis.Redis) -> None:
    done = _cli(settings, "submit", "hi", "--max-budget-usd", "-1", "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error["fields"][0]["field"] == "max_budget_usd"
    assert list(redis_client.scan_iter(match=f"{settings.key_prefix}*")) == []
    assert _broker_messages(redis_client, settings.queue) == []


def test_cli_cancel_and_list(settings: Settings, client: Client) -> None:
    handle = client.submit(prompt="cancel me")
    done = _cli(settings, "cancel", handle.id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"id": handle.id, "result": "cancelled"}
    listed = json.loads(_cli(settings, "list", "--status", "cancelled", "--json").stdout)
    assert [item["id"] for item in listed] == [handle.id]
    events = [json.loads(line)["type"] for line in _cli(settings, "events", handle.id, "--json").stdout.splitlines()]
    assert events == ["submitted", "cancelled"]


def test_cli_unknown_job_exits_5(settings: Settings, redis_client: redis.Redis) -> None:
    assert _cli(settings, "status", "no-such-job").returncode == 5


def test_cli_wait_times_out_with_exit_4_while_the_job_goes_on(settings: Settings, client: Client) -> None:
    handle = client.submit(prompt="nobody runs me")
    done = _cli(settings, "wait", handle.id, "--timeout", "0.5", "--json")
    assert done.returncode == 4
    assert client.get(handle.id).status == "queued"


def test_cli_refuses_an_unknown_status_filter(settings: Settings, redis_client: redis.Redis) -> None:
    done = _cli(settings, "list", "--status", "bogus", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["fields"][0]["field"] == "status"


def test_cli_unreadable_prompt_file_is_bad_input(settings: Settings, redis_client: redis.Redis) -> None:
    done = _cli(settings, "submit", "@/no/such/prompt.txt", "--json")
    assert done.returncode == 2
    assert "cannot read /no/such/prompt.txt" in json.loads(done.stdout)["error"]
    assert list(redis_client.scan_iter(match=f"{settings.key_prefix}*")) == []
