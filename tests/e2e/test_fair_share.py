"""Fair share end to end: when several tenants' jobs wait for slots, slots go by weight.

One account with one slot, two worker processes, the real CLI and the simulator. Tenant `fa` (weight 3) puts six jobs
in the waiting line, then tenant `fb` (weight 1) two: `fb` still gets one slot in four (weighted fair queueing over
tenants), instead of waiting behind all of `fa`'s backlog.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("scarce", max_concurrency=1)]


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "default"\n\n'
        '[[tenants]]\nname = "fa"\nweight = 3\n\n'
        '[[tenants]]\nname = "fb"\nweight = 1\n'
    )
    return make_settings(redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, **FAST_E2E)


def test_waiting_slots_go_to_tenants_by_weight(
    client: Client, workers: WorkerFactory, unique: str, settings: Settings, redis_client: redis.Redis
) -> None:
    workers(concurrency=4)
    workers(concurrency=4)
    busy = client.submit(prompt=f"[[sim: stall 6]] hold the only slot {unique}", idle_timeout_s=60)
    run_until(lambda: claude_pids([busy.id]), 60, what="the busy job's CLI")
    line = Keys(settings.key_prefix).account_waiters("scarce")
    a_jobs = [client.submit(prompt=f"[[sim: text a]] a {i} {unique}", tenant="fa") for i in range(6)]
    run_until(lambda: redis_client.zcard(line) == 6, 30, what="fa's jobs in line")
    b_jobs = [client.submit(prompt=f"[[sim: text b]] b {i} {unique}", tenant="fb") for i in range(2)]
    run_until(lambda: redis_client.zcard(line) == 8, 30, what="fb's jobs in line")
    # Everything waited while the only slot was taken, or the order below would prove nothing.
    assert client.get(busy.id).status == "running"

    records = {j.id: client.wait(j.id, timeout=180, poll_s=0.2) for j in [busy, *a_jobs, *b_jobs]}
    assert all(r.status == "succeeded" for r in records.values()), {k: r.error for k, r in records.items()}
    started = sorted([*a_jobs, *b_jobs], key=lambda j: records[j.id].attempts[0].started_at)
    order = [records[j.id].spec.tenant for j in started]
    # 3:1 while both wait: one of fb's jobs among the first four slots, the other among the next four; without fair
    # share (oldest first) both would come last.
    assert order[:4].count("fb") == 1, order
    assert order[4:].count("fb") == 1, order
    # Within a tenant, submit order holds.
    assert [j.id for j in started if records[j.id].spec.tenant == "fa"] == [j.id for j in a_jobs]


def test_priority_orders_within_a_tenant_not_across_tenants(
    client: Client, workers: WorkerFactory, unique: str, settings: Settings, redis_client: redis.Redis
) -> None:
    workers(concurrency=4)
    busy = client.submit(prompt=f"[[sim: stall 6]] hold the only slot {unique}", idle_timeout_s=60)
    run_until(lambda: claude_pids([busy.id]), 60, what="the busy job's CLI")
    line = Keys(settings.key_prefix).account_waiters("scarce")
    low = [client.submit(prompt=f"[[sim: text a]] a {i} {unique}", tenant="fa", priority=5) for i in range(3)]
    run_until(lambda: redis_client.zcard(line) == 3, 30, what="fa's priority-5 jobs in line")
    other = client.submit(prompt=f"[[sim: text b]] b {unique}", tenant="fb", priority=9)
    run_until(lambda: redis_client.zcard(line) == 4, 30, what="fb's job in line")
    urgent = client.submit(prompt=f"[[sim: text a]] urgent {unique}", tenant="fa", priority=0)
    run_until(lambda: redis_client.zcard(line) == 5, 30, what="fa's urgent job in line")
    assert client.get(busy.id).status == "running"  # everything waited for the only slot

    jobs = [busy, *low, other, urgent]
    records = {j.id: client.wait(j.id, timeout=180, poll_s=0.2) for j in jobs}
    assert all(r.status == "succeeded" for r in records.values()), {k: r.error for k, r in records.items()}
    started = [j.id for j in sorted(jobs[1:], key=lambda j: records[j.id].attempts[0].started_at)]
    # fa's first turn serves its urgent job; fb's priority-9 job gets its share of turns (3:1) instead of waiting
    # behind fa's priority-5 backlog (priority orders within a tenant, fair share across tenants); fa's jobs of one
    # priority go in submit order.
    assert started[0] == urgent.id, started
    assert other.id in started[:4], started
    assert [j for j in started if j in {x.id for x in low}] == [x.id for x in low]
