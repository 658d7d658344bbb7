"""Settings and the account pool: defaults, environment, and errors that name the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claudeq.config.account_pool import AccountPool
from claudeq.config.celery import celery_config
from claudeq.config.settings import Settings, load_settings
from claudeq.errors import ConfigError


def test_defaults_match_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAUDEQ_REDIS_URL", raising=False)
    settings = load_settings(_env_file=None)
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.key_prefix == "claudeq:"
    assert settings.policy.workspace_roots == []


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", "rediss://:secret@redis.example:6380/2")
    monkeypatch.setenv("CLAUDEQ_CONCURRENCY", "8")
    monkeypatch.setenv("CLAUDEQ_POLICY__WORKSPACE_ROOTS", '["/srv/work"]')
    settings = load_settings(_env_file=None)
    assert settings.concurrency == 8
    assert settings.policy.workspace_roots == [Path("/srv/work")]
    assert settings.redacted_redis_url() == "rediss://:***@redis.example:6380/2"


def test_invalid_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_CONCURRENCY", "-3")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert info.value.field == "CLAUDEQ_CONCURRENCY"
    monkeypatch.delenv("CLAUDEQ_CONCURRENCY")
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", "http://nope")
    with pytest.raises(ConfigError, match=r"CLAUDEQ_REDIS_URL.*redis://"):
        load_settings(_env_file=None)


def test_celery_config_has_the_long_run_settings() -> None:
    settings = Settings(_env_file=None, max_deadline_s=7200)  # type: ignore[call-arg]
    conf = celery_config(settings)
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_cancel_long_running_tasks_on_connection_loss"]
    visibility = settings.visibility_timeout_s
    assert visibility > 7200
    assert conf["broker_transport_options"]["visibility_timeout"] == visibility
    # kombu keeps no copy of delivered messages in Redis: the record and the reconciler recover lost work.
    assert conf["broker_transport_options"]["ack_emulation"] is False
    assert conf["result_backend_transport_options"]["visibility_timeout"] == visibility
    assert conf["visibility_timeout"] == visibility


def test_celery_task_events_are_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """More broker messages per job only when something reads them (Flower under compose)."""
    conf = celery_config(Settings(_env_file=None))  # type: ignore[call-arg]
    assert not conf["worker_send_task_events"] and not conf["task_send_sent_event"]
    monkeypatch.setenv("CLAUDEQ_CELERY_EVENTS", "true")
    conf = celery_config(load_settings(_env_file=None))
    assert conf["worker_send_task_events"] and conf["task_send_sent_event"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "accounts.toml"
    path.write_text(text)
    return path


def test_accounts_file_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "tok"
    token_file.write_text("sk-ant-oat01-test-file\n")
    path = _write(
        tmp_path,
        f"""
[[accounts]]
name = "main"
kind = "oauth"
token_env = "MAIN_TOKEN"
max_concurrency = 2

[[accounts]]
name = "api"
kind = "api_key"
token_file = "{token_file}"
models = ["claude-haiku-5-5"]
""",
    )
    monkeypatch.setenv("MAIN_TOKEN", "sk-ant-oat01-test-main")
    pool = AccountPool.from_toml(path)
    assert pool.names == ["main", "api"]
    assert pool.get("main") is not None and pool.get("main").read_token() == "sk-ant-oat01-test-main"  # type: ignore[union-attr]
    api = pool.get("api")
    assert api is not None and api.read_token() == "sk-ant-oat01-test-file"
    assert api.token_env_var == "ANTHROPIC_API_KEY"
    assert not api.allows_model("claude-opus-5-5") and api.allows_model("claude-haiku-5-5")
    assert pool.secret_env_vars() == {"MAIN_TOKEN"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[accounts]]\nname = "a"\nkind = "oauth"\n', "exactly one of token_env or token_file"),
        ('[[accounts]]\nname = "a"\nkind = "robot"\ntoken_env = "X"\n', "accounts.0.kind"),
        ('[[accounts]]\nname = "a"\nkind = "oauth"\ntoken_env = "X"\ntoken = "sk"\n', "Extra inputs"),
        (
            '[[accounts]]\nname = "a"\nkind = "oauth"\ntoken_env = "X"\n[[accounts]]\nname = "a"\nkind = "oauth"\n'
            'token_env = "Y"\n',
            "used twice",
        ),
        ("[[accounts]\n", "not valid TOML"),
    ],
)
def test_bad_accounts_file_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AccountPool.from_toml(_write(tmp_path, text))


def test_missing_token_is_reported_without_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    pool = AccountPool.from_dict({"accounts": [{"name": "a", "kind": "oauth", "token_env": "NOPE_TOKEN"}]})
    with pytest.raises(ConfigError, match="NOPE_TOKEN is empty or unset"):
        pool.accounts[0].read_token()


def test_a_token_in_the_environment_makes_a_default_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test-env")
    monkeypatch.delenv("CLAUDEQ_ACCOUNTS_FILE", raising=False)
    settings = load_settings(_env_file=None)
    assert settings.accounts.names == ["default"]


def test_an_interactive_login_account_runs_one_job_at_a_time() -> None:
    account = {"name": "me", "kind": "oauth", "token_env": "T", "config_dir": "/h/.c", "max_concurrency": 2}
    with pytest.raises(ConfigError, match="max_concurrency = 1"):
        AccountPool.from_dict({"accounts": [account]})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://u:pw@[::1]:6379/0", "redis://u:***@[::1]:6379/0"),
        ("redis://h:6379/0?password=s3cret&db=1", "redis://h:6379/0?password=***&db=1"),
        ("redis://h/0", "redis://h/0"),
    ],
)
def test_redis_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert Settings(_env_file=None, redis_url=url).redacted_redis_url() == shown  # type: ignore[call-arg]


def test_visibility_timeout_outlasts_every_attempt_a_job_may_make() -> None:
    settings = Settings(_env_file=None, max_deadline_s=3600)  # type: ignore[call-arg]
    assert settings.visibility_timeout_s > 20 * 3600


@pytest.mark.parametrize("name", ["claudeq:conv-turns:chat", "unacked", "unacked_index", "_kombu.binding.x", ""])
def test_a_queue_name_that_is_a_claudeq_or_kombu_key_is_a_configuration_error(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDEQ_QUEUES", json.dumps(["claudeq.runs", name]))
    with pytest.raises(ConfigError, match="CLAUDEQ_QUEUES"):
        load_settings(_env_file=None)


def test_job_queues_are_the_default_queue_and_the_consumed_ones() -> None:
    settings = Settings(_env_file=None, queue="a", queues=["b", "a", "c"])  # type: ignore[call-arg]
    assert settings.job_queues == ["a", "b", "c"]


def test_sentinels_are_read_as_host_port_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", "redis://:s3cr%2Ft@ignored:6379/3")
    monkeypatch.setenv("CLAUDEQ_REDIS_SENTINELS", "10.0.0.1:26379, sentinel-b:26380,[::1]:26381")
    monkeypatch.setenv("CLAUDEQ_REDIS_MASTER_NAME", "cq")
    settings = load_settings(_env_file=None)
    assert settings.sentinel_addresses == [("10.0.0.1", 26379), ("sentinel-b", 26380), ("::1", 26381)]
    conf = celery_config(settings)
    # kombu's sentinel transport: one URL per sentinel with the primary's password and db; the name beside them.
    assert conf["broker_url"] == (
        "sentinel://:s3cr%2Ft@10.0.0.1:26379/3;sentinel://:s3cr%2Ft@sentinel-b:26380/3;sentinel://:s3cr%2Ft@[::1]:26381/3"
    )
    assert conf["broker_transport_options"]["master_name"] == "cq"


def test_without_sentinels_the_broker_is_the_redis_url() -> None:
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:6380/1")  # type: ignore[call-arg]
    conf = celery_config(settings)
    assert settings.sentinel_addresses == []
    assert conf["broker_url"] == "redis://127.0.0.1:6380/1"
    assert "master_name" not in conf["broker_transport_options"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [("sentinel-a", "not host:port"), ("a:26379,b:", "not host:port"), ("a:99999", "not host:port")],
)
def test_a_bad_sentinel_list_names_the_variable_and_the_form(
    monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    monkeypatch.setenv("CLAUDEQ_REDIS_SENTINELS", value)
    with pytest.raises(ConfigError, match=rf"CLAUDEQ_REDIS_SENTINELS.*{reason}") as info:
        load_settings(_env_file=None)
    assert info.value.field == "CLAUDEQ_REDIS_SENTINELS"


def test_a_unix_socket_cannot_be_failed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", "unix:///run/redis.sock")
    monkeypatch.setenv("CLAUDEQ_REDIS_SENTINELS", "10.0.0.1:26379")
    with pytest.raises(ConfigError, match="unix"):
        load_settings(_env_file=None)
