"""A run's heartbeat is one script call: it extends the lease, moves the run's expiry in its account slot and its
tenant's runs, and reports a cancel flag, in one round trip (a worker with hundreds of long runs in flight sends
one per run every `CLAUDEQ_HEARTBEAT_S`). A heartbeat whose lease is no longer ours touches nothing. A private
redis-server, so the command counts are ours alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.keys import Keys
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.worker.accounts.manager import AccountManager, SlotLease
from claudeq.worker.store.job_store import make_worker_store
from tests.conftest import make_settings
from tests.support.aio import run
from tests.support.redis_server import PrivateRedis, command_calls, commands_since

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private_url() -> Iterator[str]:
    server = PrivateRedis()
    try:
        yield server.url
    finally:
        server.stop()


def test_one_script_call_extends_lease_slot_and_tenant_run_and_reports_a_cancel(
    private_url: str, tmp_path: Path
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "t"\nmax_concurrency = 4\n')
    settings = make_settings(private_url, "beat", tenants_file=tenants)
    client = redis.Redis.from_url(private_url)
    keys = Keys(settings.key_prefix)
    store = make_worker_store(settings, client)
    account = AccountConfig(name="a", kind="api_key", token_env="T_A", max_concurrency=2)
    accounts = AccountManager(settings, client, keys, AccountPool(accounts=[account]))
    spec = JobSpec(prompt="beat", tenant="t")
    run_call(store.create_call(JobRecord(id="j1", spec=spec, status="queued", created_at=utcnow())))
    claim = run(store.send(store.claim_call("j1", "w1", 5)))
    slot = run(accounts.acquire("j1", spec))
    assert isinstance(slot, SlotLease) and slot.tenant == "t"
    expiring = accounts.expiring_keys(slot)
    assert expiring == [keys.account_slots("a"), keys.tenant_runs("t")]
    slot_before = client.zscore(keys.account_slots("a"), "j1")
    run_before = client.zscore(keys.tenant_runs("t"), "j1")
    assert slot_before is not None and run_before is not None
    assert not run(store.send(store.beat_call("nobody", "w1", 1, 60))).ours  # the script is loaded (SCRIPT LOAD once)
    time.sleep(0.05)

    before = command_calls(client)
    beat = run(store.send(store.beat_call("j1", "w1", claim.fence, 60, expiring)))
    cost = commands_since(client, before)
    assert (beat.ours, beat.held, beat.cancelled) == (True, True, False)
    assert cost["evalsha"] == 1, cost  # one round trip
    lease = client.zscore(keys.running, "j1")
    assert lease is not None and lease > time.time() + 50  # the lease: 5 s -> 60 s (the slot and the run: 15 s -> 60 s)
    assert client.zscore(keys.account_slots("a"), "j1") > slot_before + 40  # type: ignore[operator]
    assert client.zscore(keys.tenant_runs("t"), "j1") > run_before + 40  # type: ignore[operator]

    client.hset(keys.job("j1"), "cancel", "1")
    assert run(store.send(store.beat_call("j1", "w1", claim.fence, 60, expiring))).cancelled

    client.zrem(keys.account_slots("a"), "j1")  # the slot expired and was dropped meanwhile
    beat = run(store.send(store.beat_call("j1", "w1", claim.fence, 60, expiring)))
    assert beat.ours and not beat.held
    assert client.zscore(keys.account_slots("a"), "j1") is None  # not taken back by the heartbeat (XX)

    # Another worker's heartbeat (a stale fence) extends and moves nothing.
    slot_score = client.zscore(keys.tenant_runs("t"), "j1")
    assert not run(store.send(store.beat_call("j1", "w2", claim.fence + 1, 600, expiring))).ours
    lease = client.zscore(keys.running, "j1")
    assert lease is not None and lease <= time.time() + 60
    assert client.zscore(keys.tenant_runs("t"), "j1") == slot_score
    client.close()
