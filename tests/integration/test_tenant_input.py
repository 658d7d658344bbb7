"""One tenant's bad input stays its own (issue 53): a spec that would name shared state, carry characters that
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
