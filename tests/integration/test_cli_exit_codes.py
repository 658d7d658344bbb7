"""The `claudeq` command line as an operator runs it: `config check`, and the exit codes README promises
(1 Redis unreachable, 3 finished but not succeeded)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.integration


def cli(settings: Settings | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m claudeq.producer.cli ARGS` with only the CLAUDEQ_* variables given here (none inherited)."""
    base = {k: v for k, v in tree_env().items() if not k.startswith(("CLAUDEQ_", "CLAUDE_CODE_", "ANTHROPIC_"))}
    if settings is not None:
        base |= {
            "CLAUDEQ_REDIS_URL": settings.redis_url,
            "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
            "CLAUDEQ_QUEUE": settings.queue,
            "CLAUDEQ_QUEUES": json.dumps(settings.queues),
        }
    return subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", *args],
        env=base | env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def accounts_toml(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "accounts.toml"
    path.write_text(
        "".join(f'[[accounts]]\nname = "{n}"\nkind = "api_key"\ntoken_env = "CQT_TOKEN_{n.upper()}"\n\n' for n in names)
    )
    return path


def test_config_check_passes_with_redis_and_every_token_and_never_shows_a_token(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    token = f"plainkey{uuid.uuid4().hex}"
    done = cli(
        settings,
        "config",
        "check",
        "--json",
        CLAUDEQ_ACCOUNTS_FILE=str(accounts_toml(tmp_path, "one", "two")),
        CQT_TOKEN_ONE=token,
        CQT_TOKEN_TWO=token + "2",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["redis"] == "ok" and report["problems"] == []
    assert [(a["name"], a["token"]) for a in report["accounts"]] == [("one", "present"), ("two", "present")]
    assert report["queues"] == settings.queues
    assert token not in done.stdout + done.stderr
    table = cli(
        settings, "config", "check", CLAUDEQ_ACCOUNTS_FILE=str(accounts_toml(tmp_path, "one")), CQT_TOKEN_ONE=token
    )
    assert table.returncode == 0 and "configuration ok" in table.stdout
    assert token not in table.stdout + table.stderr


def test_config_check_names_a_missing_token_with_exit_2(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    done = cli(
        settings,
        "config",
        "check",
        "--json",
        CLAUDEQ_ACCOUNTS_FILE=str(accounts_toml(tmp_path, "one", "two")),
        CQT_TOKEN_ONE="present-token-value",
    )
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert [(a["name"], a["token"]) for a in report["accounts"]] == [("one", "present"), ("two", "missing")]
    assert any("CQT_TOKEN_TWO" in p for p in report["problems"]), report["problems"]
    assert "present-token-value" not in done.stdout + done.stderr


def test_config_check_refuses_bad_settings_with_exit_2(tmp_path: Path) -> None:
    done = cli(None, "config", "check", "--json", CLAUDEQ_CONCURRENCY="many")
    assert done.returncode == 2
    assert "CLAUDEQ_CONCURRENCY" in done.stdout + done.stderr


def test_config_check_with_redis_unreachable_exits_1_without_showing_its_password(tmp_path: Path) -> None:
    password = f"rpw{uuid.uuid4().hex}"
    done = cli(
        None,
        "config",
        "check",
        "--json",
        CLAUDEQ_REDIS_URL=f"redis://:{password}@127.0.0.1:1/0",
        CLAUDEQ_ACCOUNTS_FILE=str(accounts_toml(tmp_path, "one")),
        CQT_TOKEN_ONE="some-token-value",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["redis"].startswith("unreachable") and len(report["problems"]) == 1
    assert report["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert password not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "args", [("status", "some-job"), ("submit", "hello"), ("list",), ("events", "some-job"), ("wait", "some-job")]
)
def test_redis_unreachable_exits_1(args: tuple[str, ...]) -> None:
    password = f"rpw{uuid.uuid4().hex}"
    done = cli(None, *args, "--json", CLAUDEQ_REDIS_URL=f"redis://:{password}@127.0.0.1:1/0")
    assert done.returncode == 1, (args, done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert password not in done.stdout + done.stderr


def test_wait_and_status_exit_3_for_a_job_that_finished_without_success(settings: Settings, client: Client) -> None:
    handle = client.submit(prompt="cancelled before it ran")
    assert client.cancel(handle.id) == "cancelled"
    waited = cli(settings, "wait", handle.id, "--json")
    assert waited.returncode == 3, waited.stdout + waited.stderr
    assert json.loads(waited.stdout)["status"] == "cancelled"
    assert cli(settings, "wait", handle.id).returncode == 3
    assert cli(settings, "status", handle.id, "--json").returncode == 0  # status only shows it


def test_config_check_opens_the_transcript_archive(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    accounts = str(accounts_toml(tmp_path, "one"))
    good = cli(
        settings,
        "config",
        "check",
        "--json",
        CLAUDEQ_ACCOUNTS_FILE=accounts,
        CQT_TOKEN_ONE="tok",
        CLAUDEQ_ARCHIVE_URL=f"sqlite:///{tmp_path / 'archive.db'}",
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["archive"] == "ok"
    bad = cli(
        settings,
        "config",
        "check",
        "--json",
        CLAUDEQ_ACCOUNTS_FILE=accounts,
        CQT_TOKEN_ONE="tok",
        CLAUDEQ_ARCHIVE_URL="postgresql://u:pw-never-shown@127.0.0.1:1/x?connect_timeout=2",
    )
    assert bad.returncode != 0
    report = json.loads(bad.stdout)
    assert report["archive"] == "unreachable" and any("archive_url" in p for p in report["problems"])
    assert "pw-never-shown" not in bad.stdout + bad.stderr


def test_schedule_commands_add_list_pause_resume_remove(settings: Settings, redis_client: redis.Redis) -> None:
    added = cli(
        settings, "schedule", "add", "nightly", "review it", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--json"
    )
    assert added.returncode == 0, added.stdout + added.stderr
    info = json.loads(added.stdout)
    assert info["schedule"]["cron"] == "0 2 * * *" and info["schedule"]["spec"]["prompt"] == "review it"
    assert info["next_tick"] is not None
    bad = cli(settings, "schedule", "add", "other", "p", "--cron", "whenever", "--json")
    assert bad.returncode == 2 and any(f["field"] == "cron" for f in json.loads(bad.stdout)["fields"])
    both = cli(settings, "schedule", "add", "nightly", "p", "--every", "5")
    assert both.returncode == 2 and "exists" in both.stderr
    assert cli(settings, "schedule", "pause", "nightly").returncode == 0
    listed = json.loads(cli(settings, "schedule", "list", "--json").stdout)
    assert [(s["schedule"]["name"], s["schedule"]["paused"], s["next_tick"]) for s in listed] == [
        ("nightly", True, None)
    ]
    assert "paused" in cli(settings, "schedule", "list").stdout
    assert cli(settings, "schedule", "resume", "nightly").returncode == 0
    assert cli(settings, "schedule", "remove", "nightly").returncode == 0
    assert cli(settings, "schedule", "remove", "nightly").returncode == 5  # not found
    assert json.loads(cli(settings, "schedule", "list", "--json").stdout) == []
