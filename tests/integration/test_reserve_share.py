"""Reserved fair share on the real Redis: the share cap (active tenants, the idle grace, rounding, `max_concurrency`,
a tenant alone), and the AccountManager keeping a flooding tenant to its share while another tenant is active
(docs/architecture.md#fair-share)."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.config.tenants import TenantConfig, Tenants
from claudeq.keys import Keys
from claudeq.models import JobSpec
from claudeq.script_calls import PipeCall, run_call
from claudeq.tenants import TenantStore, effective_cap
from claudeq.worker.accounts.manager import AccountManager, NoAccount, SlotLease
from tests.conftest import make_settings
from tests.support.aio import run

pytestmark = pytest.mark.integration

TENANTS = """
reserve_share = {on}
share_idle_s = {grace}

[[tenants]]
name = "a"
weight = 3

[[tenants]]
name = "b"
weight = 1

[[tenants]]
name = "c"
weight = 3
max_concurrency = 2
"""


def tenants_file(tmp_path: Path, on: bool = True, grace: float = 0.5) -> Path:
    path = tmp_path / f"tenants-{'on' if on else 'off'}.toml"
    path.write_text(TENANTS.format(on="true" if on else "false", grace=grace))
    return path


@pytest.fixture
def settings(redis_url: str, unique: str, tmp_path: Path) -> Settings:
    return make_settings(redis_url, unique, tenants_file=tenants_file(tmp_path))


def manager(settings: Settings, client: redis.Redis, *accounts: AccountConfig) -> AccountManager:
    return AccountManager(settings, client, Keys(settings.key_prefix), AccountPool(accounts=list(accounts)))


def account(name: str, n: int = 4) -> AccountConfig:
    return AccountConfig(name=name, kind="api_key", token_env=f"T_{name}", max_concurrency=n)


def lease(result: SlotLease | NoAccount) -> SlotLease:
    assert isinstance(result, SlotLease), result
    return result


def submitted(client: redis.Redis, keys: Keys, tenant: str, job_id: str) -> None:
    """What a producer with the tenants file does at submit: the job joins its tenant's active-job index."""
    client.zadd(keys.tenant_jobs(tenant), {job_id: time.time()})


def deferred(client: redis.Redis, keys: Keys, job_id: str, spec: JobSpec, tag: float) -> None:
    """A job deferred as a worker leaves it: its hash (status, spec, fair-share tag) and its deferred ready time."""
    client.hset(keys.job(job_id), mapping={"status": "deferred", "spec": spec.model_dump_json(), "vtag": repr(tag)})
    client.zadd(keys.deferred, {job_id: time.time() + 15})


def fresh() -> None:
    """Let a manager's read of the active tenants age past its reuse (0.25 s)."""
    time.sleep(0.3)


def test_the_share_cap_divides_the_slots_by_the_active_tenants_weights() -> None:
    a, b = TenantConfig(name="a", weight=3), TenantConfig(name="b", weight=1)
    tiny, capped = TenantConfig(name="t", weight=0.1), TenantConfig(name="c", weight=3, max_concurrency=4)
    tenants = Tenants(tenants=[a, b, tiny, capped], reserve_share=True)
    # Alone, a tenant keeps every slot; with another active, its weighted share, rounded down.
    assert tenants.share_cap(a, set(), 8) == 8
    assert tenants.share_cap(a, {"a"}, 8) == 8
    assert tenants.share_cap(a, {"b"}, 8) == 6
    assert tenants.share_cap(b, {"a", "b"}, 8) == 2
    assert tenants.share_cap(b, {"a", "b"}, 7) == 1  # 7 / 4 = 1.75
    assert tenants.share_cap(a, {"a", "b", "c"}, 8) == 3  # 8 x 3 / 7 = 3.4
    # Never below one slot, however small the weight.
    assert tenants.share_cap(tiny, {"a"}, 8) == 1
    # The effective cap is the lower of max_concurrency and the share cap.
    assert effective_cap(capped, tenants.share_cap(capped, {"b"}, 8)) == 4
    assert effective_cap(capped, tenants.share_cap(capped, {"a", "b"}, 8)) == 3
    assert effective_cap(a, None) is None
    # Off (the default): no share cap.
    assert Tenants(tenants=[a, b]).share_cap(a, {"b"}, 8) is None


def test_active_tenants_are_those_with_jobs_not_finished_or_within_the_idle_grace(
    settings: Settings, redis_client: redis.Redis, unique: str, tmp_path: Path
) -> None:
    keys = Keys(settings.key_prefix)
    store = TenantStore(redis_client, keys, settings.tenants)
    assert run_call(store.active_call()) == set()
    submitted(redis_client, keys, "a", "a1")
    submitted(redis_client, keys, "b", "b1")
    assert run_call(store.active_call()) == {"a", "b"}
    run_call(store.unindex_call("b", "b1"))  # b's last job finished: b stays active for share_idle_s (0.5 s)
    assert run_call(store.active_call()) == {"a", "b"}
    assert run_call(store.active_call(now=time.time() + 0.6)) == {"a"}
    # Without reserve_share nothing is written when a job finishes.
    off = make_settings(settings.redis_url, unique, tenants_file=tenants_file(tmp_path, on=False))
    run_call(TenantStore(redis_client, keys, off.tenants).unindex_call("a", "a1"))
    assert redis_client.hget(keys.tenants_done, "a") is None


def test_a_flooding_tenant_leaves_its_share_of_slots_to_another_active_tenant(
    settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    m = manager(settings, redis_client, account("x"), account("y"))
    spec_a, spec_b = JobSpec(prompt="x", tenant="a"), JobSpec(prompt="x", tenant="b")
    for i in range(1, 11):
        submitted(redis_client, keys, "a", f"a{i}")
    # a alone takes every slot of the fleet (8).
    runs = [lease(run(m.acquire(f"a{i}", spec_a))) for i in range(1, 9)]
    # Its ninth job waits in its own line (its cap is the 8 slots), not in the accounts' lines.
    ninth = run(m.acquire("a9", spec_a))
    assert isinstance(ninth, NoAccount) and ninth.tenant == "a"
    for job_id in ("a9", "a10"):
        deferred(redis_client, keys, job_id, spec_a, tag=float(job_id[1:]))
        run(m.admission.add_tenant_waiter("a", job_id, float(job_id[1:])))
    # b becomes active: a's share is 6 of 8. Two of a's runs end; neither hands its slot to a's waiters.
    submitted(redis_client, keys, "b", "b1")
    submitted(redis_client, keys, "b", "b2")
    fresh()
    assert run(m.release(runs[0])) == []
    assert run(m.release(runs[1])) == []
    # b's jobs start at once on the slots a left (without waiting for another of a's runs to end).
    b_runs = [lease(run(m.acquire("b1", spec_b))), lease(run(m.acquire("b2", spec_b)))]
    # a at its share: its next job waits for one of its runs, and says why.
    assert redis_client.zcard(keys.tenant_runs("a")) == 6
    over = run(m.acquire("a11", spec_a))
    assert isinstance(over, NoAccount) and over.tenant == "a" and "reserve_share" in over.reason
    # b finishes and goes idle: after the grace a's share is every slot again, and the end of one of its runs lets
    # both its waiters go (the slots b left are free).
    for done in b_runs:
        run(m.release(done))
        run(m.admission.job_done("b", done.job_id))
    time.sleep(settings.tenants.share_idle_s + 0.1)
    woken = run(m.release(runs[2]))
    assert woken == ["a9", "a10"], woken
    assert lease(run(m.acquire("a9", spec_a))) and lease(run(m.acquire("a10", spec_a)))
    assert redis_client.zcard(keys.tenant_runs("a")) == 7


def test_a_tenants_jobs_waiting_for_a_slot_count_toward_its_share(
    settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    m = manager(settings, redis_client, account("x"))
    redis_client.zadd(keys.account_slots("x"), {f"other{i}": time.time() + 60 for i in range(4)})  # x is full
    submitted(redis_client, keys, "a", "a1")
    submitted(redis_client, keys, "b", "b1")
    spec_a = JobSpec(prompt="x", tenant="a")
    # a's share is 3 of the 4 slots: three of its jobs wait in x's line, held among its runs ...
    for job_id in ("a1", "a2", "a3"):
        waits = run(m.acquire(job_id, spec_a))
        assert isinstance(waits, NoAccount) and waits.accounts == ["x"] and waits.tenant is None
    # ... and a fourth waits in a's own line: a's backlog never queues in the accounts' lines past its share.
    fourth = run(m.acquire("a4", spec_a))
    assert isinstance(fourth, NoAccount) and fourth.tenant == "a" and fourth.accounts == []


def test_the_active_tenants_are_read_once_per_reuse_window_and_not_at_all_when_off(
    settings: Settings, redis_client: redis.Redis, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = manager(settings, redis_client, account("x", 8))
    reads: list[float] = []
    real = m.tenant_store.active_call

    def active(now: float | None = None) -> PipeCall[set[str]]:
        reads.append(time.monotonic())
        return real(now)

    monkeypatch.setattr(m.tenant_store, "active_call", active)
    spec = JobSpec(prompt="x", tenant="a")
    began = time.monotonic()
    held = [lease(run(m.acquire(f"a{i}", spec))) for i in range(3)]
    for done in held:
        run(m.release(done))
    took = time.monotonic() - began
    # Six calls that wanted the active tenants: one read per 0.25 s at most (one in all unless the machine is slow).
    assert 1 <= len(reads) <= 1 + took / 0.25, (len(reads), took)
    assert all(b - a >= 0.24 for a, b in itertools.pairwise(reads))
    off = make_settings(settings.redis_url, unique, tenants_file=tenants_file(tmp_path, on=False))
    m_off = manager(off, redis_client, account("x", 8))
    monkeypatch.setattr(m_off.tenant_store, "active_call", lambda now=None: pytest.fail("read with reserve_share off"))
    run(m_off.release(lease(run(m_off.acquire("o1", spec)))))


def test_a_tenant_that_held_anothers_share_lets_it_catch_up_then_takes_its_own_back(
    settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    m = manager(settings, redis_client, account("x"), account("y"))
    spec_a, spec_b = JobSpec(prompt="x", tenant="a"), JobSpec(prompt="x", tenant="b")
    for i in range(1, 13):
        submitted(redis_client, keys, "a", f"a{i}")
    runs = [lease(run(m.acquire(f"a{i}", spec_a))) for i in range(1, 9)]  # a alone: every slot
    for i in (9, 10, 11):
        deferred(redis_client, keys, f"a{i}", spec_a, tag=float(i))
        run(m.admission.add_tenant_waiter("a", f"a{i}", float(i)))
    # b becomes active while a holds all 8 slots: its first job waits in the accounts' lines.
    for i in range(1, 5):
        submitted(redis_client, keys, "b", f"b{i}")
    fresh()
    first = run(m.acquire("b1", spec_b))
    assert isinstance(first, NoAccount) and first.tenant is None and first.accounts
    deferred(redis_client, keys, "b1", spec_b, tag=1.0)
    assert run(m.add_waiter(first.accounts, "b1", 1.0, None, ("b", 1.0))) == []
    # For a second and more a runs 2 past its share (6) and b 2 short of its own (2) with a job waiting.
    for _ in range(4):
        fresh()
        refused = run(m.acquire("a12", spec_a))
        assert isinstance(refused, NoAccount) and refused.tenant == "a"
    # Three of a's runs end. The first hands its slot to b1; a is not given the other two (it owes: its cap is one
    # below its share, 5) ...
    woken = [job for done in runs[:3] for job in run(m.release(done))]
    assert woken == ["b1"], woken
    lease(run(m.acquire("b1", spec_b)))
    assert redis_client.zcard(keys.tenant_runs("a")) == 5
    # ... so b's next jobs start at once, one past its share while it is owed; the one after that waits.
    b_runs = [lease(run(m.acquire("b2", spec_b))), lease(run(m.acquire("b3", spec_b)))]
    fourth = run(m.acquire("b4", spec_b))
    assert isinstance(fourth, NoAccount) and fourth.tenant == "b", fourth
    # While b runs one past its share and a one below its own (with jobs waiting), both balances move back to even:
    # then a's cap is its share again (a12 joins the accounts' lines instead of a's own line) and b's is 2.
    deadline = time.monotonic() + 6
    while True:
        fresh()
        again = run(m.acquire("a12", spec_a))
        assert isinstance(again, NoAccount)
        if again.tenant is None:
            break
        assert time.monotonic() < deadline, m.tenant_store.balances()
    balances = m.tenant_store.balances()
    assert abs(balances["a"]) <= 1 and abs(balances["b"]) <= 1.5, balances
    still = run(m.acquire("b4", spec_b))
    assert isinstance(still, NoAccount) and still.tenant == "b"  # b holds 3, its cap is 2 again
    assert len(b_runs) == 2


def test_a_large_catch_up_balance_moves_the_share_cap_by_a_slot_per_five_slot_seconds(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """b was kept from its 2 slots for several seconds (a's flood held every slot): owed 12 slot-seconds, it may run
    ceil(12 / 5) = 3 past its share at once, so its backlog drains in a few seconds, not one slot at a time; a, owing
    as much, gets 3 fewer than its 6 meanwhile."""
    keys = Keys(settings.key_prefix)
    m = manager(settings, redis_client, account("x"), account("y"))
    spec_a, spec_b = JobSpec(prompt="x", tenant="a"), JobSpec(prompt="x", tenant="b")
    for i in range(1, 9):
        submitted(redis_client, keys, "a", f"a{i}")
        submitted(redis_client, keys, "b", f"b{i}")
    now = time.time()
    redis_client.hset(keys.tenants_balance, mapping={"a": f"-12.0|{now}", "b": f"12.0|{now}"})
    b_runs = [lease(run(m.acquire(f"b{i}", spec_b))) for i in range(1, 6)]  # its share 2, owed 3 more
    sixth = run(m.acquire("b6", spec_b))
    assert isinstance(sixth, NoAccount) and sixth.tenant == "b", sixth
    a_runs = [lease(run(m.acquire(f"a{i}", spec_a))) for i in range(1, 4)]  # its share 6, owing 3
    fourth = run(m.acquire("a4", spec_a))
    assert isinstance(fourth, NoAccount) and fourth.tenant == "a", fourth
    assert len(b_runs) == 5 and len(a_runs) == 3


def test_with_long_runs_a_slot_of_catch_up_repays_a_run_length_of_balance(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """Runs of a minute: b owed 12 slot-seconds gets one slot past its share, not three (each extra run repays about
    a minute), and `claudeq tenants` (TenantStore.usage) shows the cap the worker applies."""
    keys = Keys(settings.key_prefix)
    m = manager(settings, redis_client, account("x"), account("y"))
    spec_a, spec_b = JobSpec(prompt="x", tenant="a"), JobSpec(prompt="x", tenant="b")
    for i in range(1, 9):
        submitted(redis_client, keys, "a", f"a{i}")
        submitted(redis_client, keys, "b", f"b{i}")
    for i in range(10):  # ten of a's runs that held their slots for a minute each end
        run(m.release(replace(lease(run(m.acquire(f"a{i % 8 + 1}", spec_a))), taken=time.monotonic() - 60)))
    assert m.admission.run_s > 50, m.admission.run_s
    fresh()
    now = time.time()
    redis_client.hset(keys.tenants_balance, mapping={"a": f"-12.0|{now}", "b": f"12.0|{now}"})
    b_runs = [lease(run(m.acquire(f"b{i}", spec_b))) for i in range(1, 4)]  # its share 2, owed 1 more
    fourth = run(m.acquire("b4", spec_b))
    assert isinstance(fourth, NoAccount) and fourth.tenant == "b", fourth
    shown = {
        u.name: u.share_cap for u in TenantStore(redis_client, keys, settings.tenants).usage(slots=m.admission.slots)
    }
    assert (shown["a"], shown["b"]) == (5, 3), shown
    assert len(b_runs) == 3
