"""`claudeq config check` reads what the fleet's guarantees rest on: Redis's own settings (AOF on, `noeviction`) and
the tenants file against the accounts, saying how to fix each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from tests.conftest import make_settings
from tests.integration.test_cli_exit_codes import accounts_toml, cli
from tests.support.redis_server import PrivateRedis

pytestmark = pytest.mark.integration


@pytest.fixture
def careless_redis() -> Iterator[PrivateRedis]:
    """A Redis of our own that would lose jobs: no AOF, keys evicted at its memory limit."""
    server = PrivateRedis(appendonly=False)
    client = redis.Redis.from_url(server.url)
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.close()
    yield server
    server.stop()


def test_config_check_warns_about_redis_settings_that_lose_jobs(
    careless_redis: PrivateRedis, unique: str, tmp_path: Path
) -> None:
    settings = make_settings(careless_redis.url, unique)
    env = {"CLAUDEQ_ACCOUNTS_FILE": str(accounts_toml(tmp_path, "one")), "CQT_TOKEN_ONE": "a-token"}
    done = cli(settings, "config", "check", "--json", **env)
    assert done.returncode == 0, done.stdout + done.stderr  # warnings, not problems: it can run, and may lose jobs
    report = json.loads(done.stdout)
    assert report["redis_config"] == {"appendonly": "no", "maxmemory-policy": "allkeys-lru"}
    [aof, eviction] = report["warnings"]
    assert "appendonly is 'no'" in aof and "`appendonly yes`" in aof
    assert "maxmemory-policy is 'allkeys-lru'" in eviction and "`maxmemory-policy noeviction`" in eviction
    human = cli(settings, "config", "check", **env)
    assert human.returncode == 0
    assert [line for line in human.stderr.splitlines() if line.startswith("warning: ")] == [
        f"warning: {aof}",
        f"warning: {eviction}",
    ]
    assert "configuration ok (2 warning(s))" in human.stdout


def test_config_check_reads_the_tenants_file_against_the_accounts(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "team-a"\naccounts = ["one", "nowhere"]\nmcp_token_env = "CQT_NO_SUCH"\n')
    env = {"CLAUDEQ_ACCOUNTS_FILE": str(accounts_toml(tmp_path, "one")), "CQT_TOKEN_ONE": "a-token"}
    done = cli(settings, "config", "check", "--json", CLAUDEQ_TENANTS_FILE=str(tenants), **env)
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["tenants"] == {"file": str(tenants), "tenants": ["team-a"]}
    assert report["problems"] == [f"{tenants}: tenants.team-a.accounts names nowhere, not an account (one)"]
    assert f"{tenants}: tenants.team-a.mcp_token_env: CQT_NO_SUCH is not set here" in report["warnings"]

    tenants.write_text('[[tenants]]\nname = "team-a"\nweight = "heavy"\n')
    broken = cli(settings, "config", "check", "--json", CLAUDEQ_TENANTS_FILE=str(tenants), **env)
    assert broken.returncode == 2, broken.stdout + broken.stderr
    [problem] = json.loads(broken.stdout)["problems"]
    assert problem.startswith("tenants: ") and str(tenants) in problem and "weight" in problem, problem
