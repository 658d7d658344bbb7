"""The CLI's environment: only this account's token, every other secret blanked; `redact`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.worker.redaction import redact, remember_secret, remember_settings_secrets
from claudeq.worker.run.cli_env import Credential, RunTags, build_env

OAUTH = AccountConfig(name="a", kind="oauth", token_env="TOK_A", base_url="http://127.0.0.1:9")
KEY = AccountConfig(name="b", kind="api_key", token_env="TOK_B")


def _settings(**overrides: object) -> Settings:
    settings = Settings(_env_file=None, **overrides)  # type: ignore[call-arg]
    settings.__dict__["accounts"] = AccountPool(accounts=[OAUTH, KEY])  # the cached_property's slot
    return settings


ENVIRON = {
    "TOK_A": "sk-ant-oat01-test-aaaa",
    "TOK_B": "sk-ant-api03-test-bbbb",
    "CLAUDEQ_REDIS_URL": "redis://:secretpw@127.0.0.1:6379/0",
    "CLAUDEQ_QUEUE": "q",
    "ANTHROPIC_API_KEY": "sk-ant-api03-stray",
    "MY_DB_PASSWORD": "hunter2hunter2",
    "HOME": "/home/w",
}


def test_oauth_run_sees_only_its_own_token(tmp_path: Path) -> None:
    env = build_env(
        OAUTH,
        _settings(secret_env=["MY_DB_PASSWORD"], cli_max_retries=1),
        credential=Credential("sk-ant-oat01-test-aaaa"),
        tags=RunTags("j1"),
        config_dir=tmp_path,
        environ=ENVIRON,
    )
    merged = {**ENVIRON, **env}  # how the SDK starts the CLI
    assert merged["CLAUDE_CODE_OAUTH_TOKEN"] == "sk-ant-oat01-test-aaaa"
    for blank in ("TOK_A", "TOK_B", "CLAUDEQ_REDIS_URL", "CLAUDEQ_QUEUE", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        assert merged[blank] == "", blank
    assert merged["MY_DB_PASSWORD"] == ""
    assert merged["HOME"] == "/home/w"
    assert merged["CLAUDE_CONFIG_DIR"] == str(tmp_path)
    assert merged["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert merged["CLAUDE_CODE_MAX_RETRIES"] == "1"
    assert merged["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert merged["CLAUDEQ_JOB_ID"] == "j1"
    secrets = [v for v in merged.values() if "sk-ant" in v or "secretpw" in v or "hunter2" in v]
    assert secrets == ["sk-ant-oat01-test-aaaa"]


def test_api_key_run_blanks_oauth_token_and_keeps_account_config_dir(tmp_path: Path) -> None:
    account = KEY.model_copy(update={"config_dir": tmp_path / "login"})
    environ = {**ENVIRON, "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-other"}
    env = build_env(
        account,
        _settings(),
        credential=Credential("sk-ant-api03-test-bbbb"),
        tags=RunTags("j2"),
        config_dir=None,
        environ=environ,
    )
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-api03-test-bbbb"
    assert env["CLAUDE_CODE_OAUTH_TOKEN"] == ""
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "login")
    assert "ANTHROPIC_BASE_URL" not in env


def test_redact_removes_known_tokens_and_token_shapes() -> None:
    remember_secret("opaque-secret-value-123")
    text = "auth opaque-secret-value-123 then sk-ant-oat01-abcdefXYZ_- end"
    out = redact(text)
    assert "opaque-secret-value-123" not in out
    assert "abcdefXYZ" not in out
    assert out.startswith("auth *** then sk-ant-*** end")


@pytest.mark.parametrize("text", ["", "nothing secret here"])
def test_redact_leaves_plain_text(text: str) -> None:
    assert redact(text) == text


def test_redact_extra_values() -> None:
    assert redact("pw=abcdef123", extra=["abcdef123"]) == "pw=***"


@pytest.mark.parametrize(
    "url", ["redis://:{pw}@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0?password={pw}", "rediss://user:{pw}@h/0"]
)
def test_redis_password_from_the_settings_is_redacted(url: str) -> None:
    password = f"rpw{uuid.uuid4().hex}"  # no token shape: only learning it from the settings removes it
    assert password in redact(f"auth {password} failed")
    remember_settings_secrets(_settings(redis_url=url.format(pw=password)), environ={})
    assert redact(f"auth {password} failed") == "auth *** failed"


def test_redis_password_in_the_environment_url_is_redacted() -> None:
    password = f"rpw{uuid.uuid4().hex}"
    remember_settings_secrets(_settings(), environ={"CLAUDEQ_REDIS_URL": f"redis://:{password}@h:6379/0"})
    assert redact(password) == "***"


def test_secret_env_values_and_unprefixed_api_keys_from_the_settings_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key, extra = f"plainkey{uuid.uuid4().hex}", f"xsec{uuid.uuid4().hex}"
    monkeypatch.setenv("TOK_B", key)
    text = f"key {key} extra {extra}"
    assert redact(text) == text
    remember_settings_secrets(_settings(secret_env=["MY_EXTRA"]), environ={"MY_EXTRA": extra})
    assert redact(text) == "key *** extra ***"
