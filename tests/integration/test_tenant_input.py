"""One tenant's bad input stays its own: a spec that would name shared state, carry characters that
cannot go on a command line, a path or a key, or ask for a model the fleet cannot run is refused at submit with the
field and the reason — through the real `Client` on a real Redis, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from claudeq.config.settings import load_settings
from claudeq.errors import ConfigError, JobSpecError
from claudeq.producer.client import Client
from tests.conftest import make_settings

pytestmark = pytest.mark.integration

TENANTS = """
[[tenants]]
name = "alpha"
callback_queues = ["alpha-app"]

[[tenants]]
name = "beta"
callback_queues = ["beta-app"]
models = ["sonnet", "house-model"]
"""


@pytest.fixture
def tenant_client(redis_url: str, unique: str, tmp_path: Path, redis_client: redis.Redis) -> Any:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS)
    client = Client(make_settings(redis_url, unique, tenants_file=path))
    yield client
    client.close()


def refusal(client: Client, **spec: Any) -> list[tuple[str, str]]:
    with pytest.raises(JobSpecError) as caught:
        client.submit(spec)
    return caught.value.errors


def nothing_written(client: Client) -> bool:
    return not list(client.store.redis.scan_iter(match=f"{client.settings.key_prefix}*"))


def test_a_tenants_callback_goes_only_to_its_own_allowed_queues(tenant_client: Client) -> None:
    prefix = tenant_client.settings.key_prefix
    for queue in ("alpha-app", f"{prefix}tenant:alpha:conv-turns:x", "unacked", "_kombu.binding.celery", "celery"):
        for target in ("link", "link_error"):
            callback = {target: {"task": "app.t", "queue": queue}}
            errors = refusal(tenant_client, prompt="p", tenant="beta", model="sonnet", **callback)
            assert [field for field, _ in errors] == [f"{target}.queue"], (queue, errors)
    assert nothing_written(tenant_client)
    callback = {"task": "app.t", "queue": "beta-app"}
    handle = tenant_client.submit(prompt="p", tenant="beta", model="sonnet", link=callback)
    assert handle.record().spec.link is not None


def test_without_a_tenants_file_callback_queues_are_the_operators(redis_url: str, unique: str) -> None:
    open_fleet = Client(make_settings(redis_url, unique))
    try:
        [(field, reason)] = refusal(open_fleet, prompt="p", link={"task": "app.t", "queue": "app"})
        assert field == "link.queue" and "CLAUDEQ_CALLBACK_QUEUES" in reason
    finally:
        open_fleet.close()
    listed = Client(make_settings(redis_url, unique, callback_queues=["app"]))
    try:
        assert listed.validate(prompt="p", link={"task": "app.t", "queue": "app"}).link is not None
    finally:
        listed.close()


def test_the_operator_cannot_list_a_callback_queue_that_is_shared_state(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("claudeq:anything", "unacked", "_kombu.binding.x", "claudeq.runs"):
        monkeypatch.setenv("CLAUDEQ_CALLBACK_QUEUES", name)
        with pytest.raises(ConfigError) as caught:
            load_settings()
        assert caught.value.field == "CLAUDEQ_CALLBACK_QUEUES", name


@pytest.mark.parametrize("field", ["model", "fallback_model", "resume", "account", "idempotency_key", "conversation"])
def test_control_characters_in_strings_that_become_argv_or_keys_are_refused(client: Client, field: str) -> None:
    for bad in ("son\x00net", "a\nb", "x\x1by"):
        errors = refusal(client, prompt="p", **{field: bad})
        assert errors[0][0] == field and "control character" in errors[0][1], errors
    assert nothing_written(client)


def test_control_characters_in_paths_are_refused_with_the_field(client: Client) -> None:
    [(field, reason)] = refusal(client, prompt="p", cwd="/srv/\x00work")
    assert field == "cwd" and "control character" in reason
    [(field, reason)] = refusal(client, prompt="p", add_dirs=["/srv/a", "/srv/\x07b"])
    assert field == "add_dirs" and "control character" in reason


def test_a_lone_surrogate_is_refused_with_the_field(client: Client) -> None:
    for spec, where in (
        ({"metadata": {"k": "bad \ud800 value"}}, "metadata"),
        ({"prompt": "p \udfff"}, "prompt"),
        ({"system_prompt": "\ud83d"}, "system_prompt"),
        ({"output_schema": {"type": "object", "description": "\udc00"}}, "output_schema"),
    ):
        errors = refusal(client, **{"prompt": "p", **spec})
        assert errors[0][0].startswith(where) and "surrogate" in errors[0][1], errors
    assert nothing_written(client)


def test_a_model_the_fleet_cannot_run_is_refused_at_submit(client: Client, tenant_client: Client) -> None:
    [(field, reason)] = refusal(client, prompt="p", model="gpt-4")
    assert field == "model" and "gpt-4" in reason and "alias" in reason
    [(field, _)] = refusal(client, prompt="p", model="sonnet", fallback_model="llama3")
    assert field == "fallback_model"
    for model in ("sonnet", "opus", "haiku", "claude-sonnet-5-5", "claude-opus-5-5[1m]", "opusplan"):
        assert client.validate(prompt="p", model=model).model == model
    # A name the operator lists (a tenant's or an account's models) is one the fleet can run.
    assert tenant_client.validate(prompt="p", tenant="beta", model="house-model").model == "house-model"


def test_an_unknown_tenants_refusal_names_no_other_tenant(tenant_client: Client) -> None:
    [(field, reason)] = refusal(tenant_client, prompt="p", tenant="gamma")
    assert field == "tenant"
    assert "alpha" not in reason and "beta" not in reason


def test_a_webhook_job_is_refused_when_no_secret_would_sign_it(redis_url: str, unique: str) -> None:
    hook = {"url": "https://hooks.example.com/x"}
    unsigned = Client(make_settings(redis_url, unique, webhook_hosts=["hooks.example.com"]))
    try:
        [(field, reason)] = refusal(unsigned, prompt="p", webhook=hook)
        assert field == "webhook" and "CLAUDEQ_WEBHOOK_SECRET" in reason
    finally:
        unsigned.close()
    signed = Client(
        make_settings(
            redis_url, unique, webhook_hosts=["hooks.example.com"], webhook_secret=SecretStr("whsec_" + "A" * 32)
        )
    )
    try:
        assert signed.validate(prompt="p", webhook=hook).webhook is not None
    finally:
        signed.close()


def schedule_refusal(client: Client, **rule: Any) -> list[tuple[str, str]]:
    with pytest.raises(JobSpecError) as caught:
        client.add_schedule("s", prompt="p", **rule)
    return caught.value.errors


def test_a_schedule_is_checked_at_add_with_the_field_and_the_reason(client: Client) -> None:
    [(field, reason)] = schedule_refusal(client, every_s=10**12)
    assert field == "every_s" and "year" in reason
    [(field, reason)] = schedule_refusal(client, cron="0 0 30 2 *")
    assert field == "cron" and "no tick" in reason
    [(field, reason)] = schedule_refusal(client, cron="61 2 * * *")
    assert field == "cron" and "minute field '61'" in reason and "Value error" not in reason
    [(field, reason)] = schedule_refusal(client, cron="0 0 1 1 * 0 2099")
    assert field == "cron" and "5" in reason
    [(field, reason)] = schedule_refusal(client)
    assert field == "every_s" and "exactly one" in reason
    assert client.schedules() == []  # nothing stored


def test_a_tenants_schedules_are_bounded_in_number_and_rate(redis_url: str, unique: str) -> None:
    limited = Client(make_settings(redis_url, unique, max_schedules_per_tenant=2, max_schedule_fires_per_hour=100))
    try:
        limited.add_schedule("a", prompt="p", every_s=3600)
        [(field, reason)] = schedule_refusal(limited, every_s=30)  # 120 an hour on its own
        assert field == "every_s" and "100" in reason
        limited.add_schedule("b", prompt="p", cron="*/5 * * * *")  # 12 an hour
        [(field, reason)] = schedule_refusal(limited, every_s=86400)
        assert field == "name" and "2 schedules" in reason
        # Another tenant's schedules are its own count.
        assert limited.add_schedule("a", prompt="p", every_s=3600, tenant="other").tenant == "other"
    finally:
        for name, tenant in (("a", "default"), ("b", "default"), ("a", "other")):
            limited.remove_schedule(name, tenant)
        limited.close()


def test_schedule_add_names_its_flags_and_list_shows_a_paused_schedules_error(client: Client) -> None:
    from tests.integration.test_cli_exit_codes import cli

    settings = client.settings
    done = cli(settings, "schedule", "add", "nightly", "p")
    assert done.returncode == 2 and "--every" in done.stderr and "every_s" not in done.stderr, done.stderr
    done = cli(settings, "schedule", "add", "nightly", "p", "--cron", "61 2 * * *")
    assert done.returncode == 2 and "--cron" in done.stderr and "minute field" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    client.add_schedule("nightly", prompt="p", cron="0 2 * * *")
    store = client._schedules
    store.redis.hset(store.keys.schedule_stats("default/nightly"), "last_error", "ValueError: [b]no next tick[/b]")
    client.pause_schedule("nightly")
    done = cli(settings, "schedule", "list", COLUMNS="250")
    assert done.returncode == 0, done.stderr
    assert "paused" in done.stdout and "[b]no next tick[/b]" in done.stdout.replace("\n", "")
    client.remove_schedule("nightly")


def test_a_deeply_nested_output_schema_is_refused_not_a_recursion_error(client: Client) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(100):
        schema = {"type": "object", "properties": {"a": schema}}
    [(field, reason)] = refusal(client, prompt="p", output_schema=schema)
    assert field == "output_schema" and "levels deep" in reason
