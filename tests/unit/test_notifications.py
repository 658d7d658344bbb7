"""End notifications at submit: a webhook only on a host the fleet allows, never with credentials in its URL; a
callback never into claudeq's own queues; a tenant's webhook applies to its jobs that name none. And the backoff
between tries."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from claudeq.errors import JobSpecError
from claudeq.producer.validation import validate_spec
from claudeq.worker.background.notifier import MAX_BACKOFF_S, backoff_s
from tests.conftest import make_settings

#: Webhooks are refused at submit when no secret would sign them.
SIGNED = {"webhook_secret": SecretStr("whsec_" + "A" * 32)}


def refused(settings: object, **spec: object) -> list[tuple[str, str]]:
    with pytest.raises(JobSpecError) as caught:
        validate_spec({"prompt": "p", **spec}, settings)  # type: ignore[arg-type]
    return caught.value.errors


def test_a_webhook_must_name_an_allowed_host_and_carry_no_credentials(unique: str) -> None:
    hosts = ["hooks.example.com", "*.corp.example"]
    settings = make_settings("redis://127.0.0.1:1/0", unique, webhook_hosts=hosts, webhook_ports=[8080], **SIGNED)
    assert validate_spec({"prompt": "p", "webhook": {"url": "https://hooks.example.com/x"}}, settings).webhook
    assert validate_spec({"prompt": "p", "webhook": {"url": "http://a.b.corp.example:8080/y"}}, settings).webhook
    for url, says in (
        ("https://evil.example/x", "not one the fleet allows"),
        ("https://corp.example/x", "not one the fleet allows"),  # `*.` is for subdomains
        ("https://hooks.example.com.evil.example/x", "not one the fleet allows"),
        ("ftp://hooks.example.com/x", "http:// or https://"),
        ("https://user:pw@hooks.example.com/x", "credentials"),
        ("https://hooks.example.com:99999/x", "not a URL"),
        ("https://hooks.example.com:6379/x", "CLAUDEQ_WEBHOOK_PORTS"),
    ):
        [(field, reason)] = refused(settings, webhook={"url": url})
        assert field == "webhook.url" and says in reason, (url, reason)
    nothing = make_settings("redis://127.0.0.1:1/0", unique, **SIGNED)
    [(field, reason)] = refused(nothing, webhook={"url": "https://hooks.example.com/x"})
    assert "CLAUDEQ_WEBHOOK_HOSTS: none" in reason


def test_a_callback_is_a_task_of_ones_own_queue(unique: str) -> None:
    settings = make_settings("redis://127.0.0.1:1/0", unique, callback_queues=["myapp"])
    spec = validate_spec({"prompt": "p", "link": {"task": "myapp.tasks.store", "queue": "myapp"}}, settings)
    assert spec.link is not None and spec.link.task == "myapp.tasks.store"
    [(field, reason)] = refused(settings, link_error={"task": "myapp.x", "queue": settings.queue})
    assert field == "link_error.queue" and "claudeq queue" in reason
    [(field, _)] = refused(settings, link={"task": "not a task name"})
    assert field == "link.task"


def test_a_tenants_webhook_applies_to_its_jobs_that_name_none(unique: str, tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "ops"\nwebhook_url = "https://hooks.example.com/ops"\nwebhook_body = "result"\n\n'
        '[[tenants]]\nname = "quiet"\n'
    )
    settings = make_settings(
        "redis://127.0.0.1:1/0", unique, tenants_file=tenants, webhook_hosts=["hooks.example.com"], **SIGNED
    )
    spec = validate_spec({"prompt": "p", "tenant": "ops"}, settings)
    assert spec.webhook is not None and spec.webhook.url.endswith("/ops") and spec.webhook.body == "result"
    own = validate_spec(
        {"prompt": "p", "tenant": "ops", "webhook": {"url": "https://hooks.example.com/mine"}}, settings
    )
    assert own.webhook is not None and own.webhook.url.endswith("/mine")
    assert validate_spec({"prompt": "p", "tenant": "quiet"}, settings).webhook is None


def test_the_wait_between_tries_doubles_with_jitter_up_to_a_ceiling() -> None:
    for attempts in range(1, 6):
        ceiling = 2.0 * 2 ** (attempts - 1)
        waits = [backoff_s(attempts, 2.0) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits) and len(set(waits)) > 1
    assert backoff_s(40, 2.0) <= MAX_BACKOFF_S


def test_a_webhook_follows_only_event_types_that_exist_and_not_the_end(unique: str) -> None:
    settings = make_settings("redis://127.0.0.1:1/0", unique, webhook_hosts=["hooks.example.com"], **SIGNED)
    url = "https://hooks.example.com/x"
    spec = validate_spec({"prompt": "p", "webhook": {"url": url, "events": ["tool_call", "retry"]}}, settings)
    assert spec.webhook is not None and spec.webhook.events == ["tool_call", "retry"]
    for events, says in (
        (["succeeded"], "not an event type"),
        (["nope"], "not an event type"),
        (["retry"] * 2, "twice"),
    ):
        [(field, reason)] = refused(settings, webhook={"url": url, "events": events})
        assert field == "webhook.events" and says in reason, reason
