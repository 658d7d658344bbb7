"""Settings as an operator writes them: a list given as one value (as docs/notifications.md writes it) or as a
comma-separated list is read, and a setting that cannot be read stops every command with exit 2, the variable and the
reason — never a traceback (docs/configuration.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from claudeq.config.settings import load_settings
from claudeq.errors import ConfigError
from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.integration


def run(module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in tree_env().items() if not k.startswith(("CLAUDEQ_", "CLAUDE_CODE_", "ANTHROPIC_"))}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=base | {"CLAUDEQ_REDIS_URL": "redis://127.0.0.1:1/0"} | env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


COMMANDS = [
    ("claudeq.producer.cli", ("submit", "hello")),
    ("claudeq.producer.cli", ("config", "check")),
    ("claudeq.worker.main", ("--check",)),
]


@pytest.mark.parametrize(("module", "args"), COMMANDS, ids=["submit", "config-check", "worker-check"])
def test_an_unreadable_setting_exits_2_naming_the_variable_without_a_traceback(
    module: str, args: tuple[str, ...]
) -> None:
    done = run(module, *args, CLAUDEQ_POLICY__RUN_UIDS="[61000,")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "CLAUDEQ_POLICY__RUN_UIDS" in done.stderr


@pytest.mark.parametrize(("module", "args"), COMMANDS, ids=["submit", "config-check", "worker-check"])
def test_a_list_setting_given_as_one_value_is_read(module: str, args: tuple[str, ...]) -> None:
    done = run(
        module,
        *args,
        CLAUDEQ_WEBHOOK_HOSTS="hooks.example.com",
        CLAUDEQ_POLICY__WORKSPACE_ROOTS="/srv/work",
        ANTHROPIC_API_KEY="sk-ant-test-not-a-key",  # an account, so `config check` finds only Redis missing
    )
    assert "Traceback" not in done.stderr + done.stdout
    assert "CLAUDEQ_WEBHOOK_HOSTS" not in done.stderr and "CLAUDEQ_POLICY" not in done.stderr
    # Redis is not there (port 1): the settings were read, the command got as far as Redis.
    assert done.returncode == 1, done.stderr


def test_list_settings_take_json_or_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_WEBHOOK_HOSTS", "hooks.example.com, *.example.org")
    monkeypatch.setenv("CLAUDEQ_POLICY__WORKSPACE_ROOTS", '["/srv/a", "/srv/b"]')
    monkeypatch.setenv("CLAUDEQ_POLICY__RUN_UIDS", "62000,62009")
    monkeypatch.setenv("CLAUDEQ_QUEUES", "claudeq.runs,claudeq.bulk")
    settings = load_settings()
    assert settings.webhook_hosts == ["hooks.example.com", "*.example.org"]
    assert [str(p) for p in settings.policy.workspace_roots] == ["/srv/a", "/srv/b"]
    assert settings.policy.run_uids == (62000, 62009)
    assert settings.queues == ["claudeq.runs", "claudeq.bulk"]


def test_a_bad_json_list_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDEQ_WEBHOOK_HOSTS", '["unclosed"')
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.field == "CLAUDEQ_WEBHOOK_HOSTS"
    assert "JSON" in caught.value.reason
