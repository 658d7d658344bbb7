"""`claudeq-worker` refuses to start on what would make it useless, with exit code 2 and a clear message."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid

import pytest

from claudeq.config.settings import Settings
from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.integration


def _worker(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **tree_env(),
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "claudeq.worker.main", *args],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_taken_metrics_port_stops_the_worker(settings: Settings, redis_client: object) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _worker(settings, "--metrics-port", str(port), CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-test-main")
    assert done.returncode == 2
    assert "CLAUDEQ_METRICS_PORT" in done.stderr
    assert "sk-ant-oat01-test-main" not in done.stderr + done.stdout


def test_no_accounts_stops_the_worker(settings: Settings, redis_client: object) -> None:
    env = {k: v for k, v in tree_env().items() if k not in ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "claudeq.worker.main"],
        env={**env, "CLAUDEQ_REDIS_URL": settings.redis_url, "CLAUDEQ_KEY_PREFIX": settings.key_prefix},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "CLAUDEQ_ACCOUNTS_FILE" in done.stderr


def test_worker_errors_never_show_the_redis_password(settings: Settings) -> None:
    password = f"rpw{uuid.uuid4().hex}"
    unreachable = settings.model_copy(update={"redis_url": f"redis://:{password}@127.0.0.1:1/0"})
    check = _worker(unreachable, "--check", CLAUDEQ_REDIS_URL=unreachable.redis_url)
    assert check.returncode == 1 and "redis unreachable" in check.stderr
    bad_config = _worker(
        unreachable, CLAUDEQ_REDIS_URL=unreachable.redis_url, CLAUDEQ_ACCOUNTS_FILE="/no/such/accounts.toml"
    )
    assert bad_config.returncode == 2 and "configuration error" in bad_config.stderr
    for done in (check, bad_config):
        assert password not in done.stdout + done.stderr
