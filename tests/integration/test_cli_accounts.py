"""`claudeq accounts` against a real Redis, configured only through the environment (as an operator runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from claudeq.config.settings import Settings
from claudeq.producer.cli_accounts import accounts_app

pytestmark = pytest.mark.integration


def test_operator_disables_and_enables_an_account_through_real_redis(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(
        '[[accounts]]\nname = "one"\nkind = "oauth"\ntoken_env = "TOKEN_ONE"\nmax_concurrency = 3\n'
        '[[accounts]]\nname = "two"\nkind = "api_key"\ntoken_env = "TOKEN_TWO"\n'
    )
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CLAUDEQ_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CLAUDEQ_ACCOUNTS_FILE", str(accounts))
    runner = CliRunner()

    result = runner.invoke(accounts_app, ["disable", "two", "--reason", "key revoked"])
    assert result.exit_code == 0, result.output
    stored = redis_client.hgetall(f"{settings.key_prefix}acct:two")
    assert stored[b"state"] == b"disabled"

    result = runner.invoke(accounts_app, ["--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["name"], r["state"], r["reason"], r["max_concurrency"]) for r in rows] == [
        ("one", "ok", None, 3),
        ("two", "disabled", "key revoked", 1),
    ]

    result = runner.invoke(accounts_app, ["enable", "two"])
    assert result.exit_code == 0
    assert json.loads(runner.invoke(accounts_app, ["--json"]).output)[1]["state"] == "ok"

    result = runner.invoke(accounts_app, ["enable", "three"])
    assert result.exit_code == 2
    assert "no account named 'three'" in result.output
