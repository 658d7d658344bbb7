"""`claudeq tenants` and `claudeq submit --tenant` against a real Redis, configured only through the environment."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.cli import app
from claudeq.tenants import hour_field
from tests.support.aio import run

pytestmark = pytest.mark.integration


def _cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings, cwd: Path, tenants: Path) -> None:
    """The CLI configured only through the environment, as the test's settings and this tenants file."""
    monkeypatch.chdir(cwd)  # no stray .env
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CLAUDEQ_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CLAUDEQ_QUEUE", settings.queue)
    monkeypatch.setenv("CLAUDEQ_QUEUES", json.dumps(settings.queues))
    monkeypatch.setenv("CLAUDEQ_TENANTS_FILE", str(tenants))


def test_tenants_shows_in_flight_waiting_and_spend_against_the_caps(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "team-a"\nmax_concurrency = 2\nweight = 3\nmax_cost_usd_per_hour = 0.5\n\n'
        '[[tenants]]\nname = "team-b"\non_budget = "fail"\n'
    )
    _cli_env(monkeypatch, settings, tmp_path, tenants)
    runner = CliRunner()

    refused = runner.invoke(app, ["submit", "hello", "--tenant", "team-c", "--json"])
    assert refused.exit_code == 2, refused.output
    assert json.loads(refused.output)["fields"][0]["field"] == "tenant"
    refused = runner.invoke(app, ["submit", "hello", "--json"])  # `default` is not in the file
    assert refused.exit_code == 2, refused.output
    for _ in range(3):
        done = runner.invoke(app, ["submit", "hello", "--tenant", "team-a", "--json"])
        assert done.exit_code == 0, done.output
    job = json.loads(done.output)["id"]
    assert json.loads(runner.invoke(app, ["status", job, "--json"]).output)["spec"]["tenant"] == "team-a"
    # One of them runs (as a worker's admission leaves it) and the tenant spent a fifth of its hourly cap.
    now = time.time()
    redis_client.zadd(f"{settings.key_prefix}tenant:team-a:runs", {job: now + 60})
    redis_client.hset(f"{settings.key_prefix}tenant:team-a:spend", hour_field(now), "0.1")

    shown = runner.invoke(app, ["tenants", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = {row["name"]: row for row in json.loads(shown.output)["tenants"]}
    assert rows["team-a"]["in_flight"] == 1
    assert rows["team-a"]["waiting"] == 2
    assert rows["team-a"]["max_concurrency"] == 2
    assert rows["team-a"]["spend_usd"]["hour"] == pytest.approx(0.1)
    assert rows["team-a"]["cap_usd"] == {"hour": 0.5, "day": None}
    assert rows["team-b"] == {
        "name": "team-b",
        "in_flight": 0,
        "waiting": 0,
        "max_concurrency": None,
        "share_cap": None,
        "balance_slot_s": None,
        "weight": 1.0,
        "on_budget": "fail",
        "spend_usd": {"hour": 0.0, "day": 0.0},
        "cap_usd": {"hour": None, "day": None},
    }
    cancelled = runner.invoke(app, ["cancel", json.loads(done.output)["id"], "--json"])
    assert cancelled.exit_code == 0
    table = runner.invoke(app, ["tenants"])
    assert table.exit_code == 0 and "team-a" in table.output and "20%" in table.output
    assert json.loads(runner.invoke(app, ["tenants", "--json"]).output)["tenants"][0]["waiting"] == 1


def test_waiting_counts_agree_when_the_producer_has_no_tenants_file(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A producer without the tenants file (an app that only submits) and workers with it: the jobs are counted as
    waiting (under `default`, all the producer knows of), and no count is left behind once they finished or were
    cancelled."""
    from claudeq.config.account_pool import AccountPool
    from claudeq.keys import Keys
    from claudeq.producer.client import Client
    from claudeq.tenants import TenantStore
    from claudeq.worker.accounts.manager import AccountManager

    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "default"\n\n[[tenants]]\nname = "team-a"\nweight = 3\n')
    worker_settings = settings.model_copy(update={"tenants_file": tenants})
    # A worker with the file has started: it marks the fleet as using tenants, so file-less producers index too.
    manager = AccountManager(worker_settings, redis_client, Keys(settings.key_prefix), AccountPool(accounts=[]))
    client = Client(settings, redis_client=redis_client)  # no tenants file: accepts any name
    done, cancelled = client.submit(prompt="hi", tenant="team-a"), client.submit(prompt="hi", tenant="team-a")
    untagged = client.submit(prompt="hi")
    store = TenantStore(redis_client, Keys(settings.key_prefix), worker_settings.tenants)

    def waiting() -> dict[str, int]:
        return {u.name: u.waiting for u in store.usage()}

    assert sum(waiting().values()) == 3
    # Their records say they were indexed: a worker's terminal write takes them out (FINISH reads no index else).
    for handle in (done, cancelled, untagged):
        assert redis_client.hget(client.store.keys.job(handle.id), "indexed") == b"1"
    run(manager.admission.job_done("team-a", done.id))  # what a worker does once the job is terminal
    run(manager.admission.job_done("default", untagged.id))
    assert client.cancel(cancelled.id) == "cancelled"
    assert waiting() == {"default": 0, "team-a": 0}
    # Left: only the tenants' job indexes, which keep finished jobs too (their listings), no count.
    left = {k.decode() for k in redis_client.scan_iter(match=f"{settings.key_prefix}tenant:*")}
    assert left == {client.store.keys.tenant_index("default"), client.store.keys.tenant_index("team-a")}


def test_a_fleet_without_tenants_keeps_no_tenant_index_and_shows_default_from_the_counters(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """No tenants file anywhere: a queued job costs no per-tenant index entry; `claudeq tenants` still shows
    `default` with its jobs waiting (the status counters)."""
    from claudeq.producer.client import Client
    from claudeq.tenants import TenantStore

    client = Client(settings, redis_client=redis_client)
    handles = [client.submit(prompt="hi")]
    handles += client.submit_many([{"prompt": "a"}, {"prompt": "b", "tenant": "team-x"}])
    assert not list(redis_client.scan_iter(match=f"{settings.key_prefix}tenant:*"))
    assert all(redis_client.hget(client.store.keys.job(h.id), "indexed") is None for h in handles)
    (usage,) = TenantStore(redis_client, client.store.keys, settings.tenants).usage()
    assert (usage.name, usage.in_flight, usage.waiting) == ("default", 0, 3)


def test_tenants_and_the_exporter_show_each_tenants_share_cap_under_reserve_share(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        'reserve_share = true\n\n[[tenants]]\nname = "team-a"\nweight = 3\n\n'
        '[[tenants]]\nname = "team-b"\nweight = 1\nmax_concurrency = 1\n'
    )
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(
        '[[accounts]]\nname = "x"\nkind = "api_key"\ntoken_env = "CQT_X"\nmax_concurrency = 4\n\n'
        '[[accounts]]\nname = "y"\nkind = "api_key"\ntoken_env = "CQT_Y"\nmax_concurrency = 4\n'
    )
    _cli_env(monkeypatch, settings, tmp_path, tenants)
    monkeypatch.setenv("CLAUDEQ_ACCOUNTS_FILE", str(accounts))
    runner = CliRunner()

    def caps() -> dict[str, object]:
        shown = runner.invoke(app, ["tenants", "--json"])
        assert shown.exit_code == 0, shown.output
        return {row["name"]: row["share_cap"] for row in json.loads(shown.output)["tenants"]}

    assert caps() == {"team-a": 8, "team-b": 8}  # nobody active: each would hold every slot alone
    for tenant in ("team-a", "team-b"):
        done = runner.invoke(app, ["submit", "hello", "--tenant", tenant, "--json"])
        assert done.exit_code == 0, done.output
    assert caps() == {"team-a": 6, "team-b": 2}  # both active: 8 slots split 3:1
    table = runner.invoke(app, ["tenants"])
    assert table.exit_code == 0 and "0/6 (share)" in table.output and "0/1" in table.output, table.output

    from claudeq.config.settings import Settings as LoadedSettings
    from claudeq.worker.metrics.exporter import ClusterCollector

    collector = ClusterCollector(LoadedSettings(), redis_client)
    samples = {
        s.labels["tenant"]: s.value
        for family in collector.collect()
        if family.name == "claudeq_tenant_share_cap"
        for s in family.samples
    }
    assert samples == {"team-a": 6, "team-b": 2}

    # team-a ran past its share while team-b waited (a worker's catch-up balances): a owes, b is owed, a slot moves.
    now = time.time()
    redis_client.hset(
        Keys(settings.key_prefix).tenants_balance, mapping={"team-a": f"-3.2|{now}", "team-b": f"3.2|{now}"}
    )
    assert caps() == {"team-a": 5, "team-b": 3}
    table = runner.invoke(app, ["tenants"])
    assert "0/5 (share," in table.output and "owes 3)" in table.output, table.output  # (wrapped)
    balances = {
        s.labels["tenant"]: s.value
        for family in collector.collect()
        if family.name == "claudeq_tenant_share_balance_slot_seconds"
        for s in family.samples
    }
    assert balances == {"team-a": pytest.approx(-3.2), "team-b": pytest.approx(3.2)}
