"""Tenants on fakeredis: the tenants file, submit-time checks, concurrency caps, spend caps and the budget clamp."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import fakeredis
import pytest
from pydantic import ValidationError

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.config.tenants import TenantConfig, Tenants
from claudeq.errors import ConfigError, JobSpecError
from claudeq.keys import Keys
from claudeq.models import JobSpec
from claudeq.permissions import spec_models
from claudeq.producer.validation import validate_spec
from claudeq.script_calls import run_call
from claudeq.tenants import SPEND_TTL_S, Admitted, AttemptCost, OverBudget, TenantStore, hour_field
from claudeq.worker.accounts.manager import AccountManager, NoAccount, SlotLease
from claudeq.worker.accounts.waiting_line import PRIORITY_SPAN
from tests.conftest import make_settings
from tests.support.aio import run

TENANTS = """
[[tenants]]
name = "a"
max_concurrency = 2
weight = 3

[[tenants]]
name = "b"
max_cost_usd_per_hour = 0.05
on_budget = "fail"
models = ["haiku"]
tool_profiles = ["none", "read-only"]
accounts = ["y"]
"""


@pytest.fixture
def tenants_settings(unique: str, tmp_path: Path) -> Settings:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS)
    return make_settings("redis://127.0.0.1:1/0", unique, tenants_file=path)


def manager(settings: Settings, redis: fakeredis.FakeRedis, *accounts: AccountConfig) -> AccountManager:
    return AccountManager(settings, redis, Keys(settings.key_prefix), AccountPool(accounts=list(accounts)))


def account(name: str, n: int = 4, **caps: float) -> AccountConfig:
    return AccountConfig(name=name, kind="api_key", token_env=f"T_{name}", max_concurrency=n, **caps)


def lease(result: SlotLease | NoAccount) -> SlotLease:
    assert isinstance(result, SlotLease), result
    return result


def test_the_file_loads_and_bad_files_name_the_field(tmp_path: Path, unique: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(TENANTS)
    tenants = Tenants.from_toml(path)
    assert tenants.names == ["a", "b"]
    assert tenants.get("b") is not None and tenants.get("b").on_budget == "fail"  # type: ignore[union-attr]
    path.write_text('[[tenants]]\nname = "a"\nweight = 0\n')
    with pytest.raises(ConfigError, match="weight"):
        Tenants.from_toml(path)
    path.write_text('[[tenants]]\nname = "a"\ntool_profiles = ["root"]\n')
    with pytest.raises(ConfigError, match="tool_profiles"):
        _ = make_settings("redis://127.0.0.1:1/0", unique, tenants_file=path).tenants


def test_without_a_file_every_tenant_is_accepted(fake_settings: Settings) -> None:
    assert validate_spec({"prompt": "x", "tenant": "anyone"}, fake_settings).tenant == "anyone"
    assert JobSpec(prompt="x").tenant == "default"


def test_submit_refuses_unknown_tenants_and_what_the_allow_lists_exclude(tenants_settings: Settings) -> None:
    with pytest.raises(JobSpecError) as unknown:
        validate_spec({"prompt": "x", "tenant": "nobody"}, tenants_settings)
    assert [f for f, _ in unknown.value.errors] == ["tenant"]
    with pytest.raises(JobSpecError) as default:
        validate_spec({"prompt": "x"}, tenants_settings)  # `default` is not in the file either
    assert [f for f, _ in default.value.errors] == ["tenant"]
    with pytest.raises(JobSpecError) as outside:
        validate_spec({"prompt": "x", "tenant": "b", "model": "opus", "tools": "web"}, tenants_settings)
    assert sorted(f for f, _ in outside.value.errors) == ["model", "tools"]
    with pytest.raises(JobSpecError):
        validate_spec({"prompt": "x", "tenant": "b", "model": "haiku", "tools": ["WebFetch"]}, tenants_settings)
    ok = validate_spec({"prompt": "x", "tenant": "b", "model": "haiku", "tools": ["Read"]}, tenants_settings)
    assert ok.tenant == "b"
    for bad in ("has:colon", "a b", ""):
        with pytest.raises(ValidationError):
            JobSpec(prompt="x", tenant=bad)


def test_every_model_field_of_a_spec_is_under_the_tenants_models(tenants_settings: Settings) -> None:
    # A new model-valued JobSpec field must be listed by spec_models, or a tenant's allow-list would not hold for it.
    every = {name for name in JobSpec.model_fields if "model" in name}
    full = JobSpec(prompt="x", **{name: "opus" for name in every})
    assert {field for field, _ in spec_models(full)} == every
    with pytest.raises(JobSpecError) as refused:
        validate_spec({"prompt": "x", "tenant": "b", "model": "haiku", "fallback_model": "opus"}, tenants_settings)
    assert refused.value.errors == [("fallback_model", "opus is not allowed for tenant 'b' (allowed: haiku)")]
    ok = validate_spec({"prompt": "x", "tenant": "b", "model": "haiku", "fallback_model": "haiku"}, tenants_settings)
    assert ok.fallback_model == "haiku"


def test_allow_unknown_governs_strangers_by_the_default_entry(tmp_path: Path, unique: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text('allow_unknown = true\n[[tenants]]\nname = "default"\nmax_concurrency = 1\n')
    settings = make_settings("redis://127.0.0.1:1/0", unique, tenants_file=path)
    assert validate_spec({"prompt": "x", "tenant": "stranger"}, settings).tenant == "stranger"
    assert settings.tenants.governing("stranger").max_concurrency == 1
    assert settings.tenants.label("stranger") == "other"
    assert settings.tenants.label("default") == "default"


def test_a_tenant_at_max_concurrency_waits_and_a_release_promotes_its_waiter(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    m = manager(tenants_settings, fake_redis, account("x", 8))
    spec = JobSpec(prompt="x", tenant="a")
    first, second = lease(run(m.acquire("j1", spec))), lease(run(m.acquire("j2", spec)))
    assert first.tenant == second.tenant == "a"
    third = run(m.acquire("j3", spec))
    assert isinstance(third, NoAccount) and third.tenant == "a" and not third.permanent
    assert "max_concurrency" in third.reason
    keys = Keys(tenants_settings.key_prefix)
    fake_redis.hset(keys.job("j3"), "status", "deferred")
    fake_redis.zadd(keys.deferred, {"j3": time.time() + 60})
    run(m.admission.add_tenant_waiter("a", "j3", 1.0))
    assert run(m.release(first)) == ["j3"]  # one of the tenant's runs ended: its waiter goes next
    assert isinstance(run(m.acquire("j3", spec)), SlotLease)
    # Another tenant is not held back by `a`'s cap.
    assert isinstance(run(m.acquire("k1", JobSpec(prompt="x"))), SlotLease)


def test_a_tenant_waiter_is_not_resent_every_lease_ttl_while_it_waits(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    m = manager(tenants_settings, fake_redis, account("x", 8))
    spec = JobSpec(prompt="x", tenant="a")
    first, _ = lease(run(m.acquire("j1", spec))), lease(run(m.acquire("j2", spec)))
    at_max = run(m.acquire("j3", spec))
    assert isinstance(at_max, NoAccount) and at_max.tenant == "a"
    keys = Keys(tenants_settings.key_prefix)
    fake_redis.hset(keys.job("j3"), "status", "deferred")
    fake_redis.zadd(keys.deferred, {"j3": at_max.ready_at.timestamp()})
    now = time.time()
    run(m.admission.add_tenant_waiter("a", "j3", 1.0))
    # In the tenant's line, the end of one of its runs promotes it: its ready time is only the fallback, far out (a
    # re-send every lease TTL would send a whole backlog through the broker again and again).
    ready = fake_redis.zscore(keys.deferred, "j3")
    assert ready is not None and ready >= now + tenants_settings.waiter_fallback_s - 1
    assert run(m.release(first)) == ["j3"]


def _deferred(
    redis: fakeredis.FakeRedis, keys: Keys, job_id: str, spec: JobSpec, tag: float, created: float = 1.7e9
) -> None:
    """A job deferred as a worker leaves it: its hash (status, spec, fair-share tag, creation time) and its deferred
    ready time."""
    fields = {"status": "deferred", "spec": spec.model_dump_json(), "vtag": repr(tag)}
    fields["created_at"] = datetime.fromtimestamp(created, UTC).isoformat()
    redis.hset(keys.job(job_id), mapping=fields)
    redis.zadd(keys.deferred, {job_id: time.time() + 15})


PEERS = """
[[tenants]]
name = "p"

[[tenants]]
name = "q"
"""


def _line_up(m: AccountManager, redis: fakeredis.FakeRedis, keys: Keys, job_id: str, spec: JobSpec, tag: float) -> None:
    """A job of `spec` (created in the order of the calls) waits in x's line at its tag, as a worker's defer leaves
    it; nothing is admitted (x's only slot is taken)."""
    created = 1.7e9 + len(redis.keys(keys.job("*")))
    _deferred(redis, keys, job_id, spec, tag, created)
    place = spec.priority * PRIORITY_SPAN + created
    assert run(m.add_waiter(["x"], job_id, tag, None, (spec.tenant, place))) == []


def test_a_tenants_turn_goes_to_its_best_job_by_priority_and_its_share_is_unchanged(
    unique: str, tmp_path: Path, fake_redis: fakeredis.FakeRedis
) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(PEERS)
    settings = make_settings("redis://127.0.0.1:1/0", unique, tenants_file=path)
    keys = Keys(settings.key_prefix)
    m = manager(settings, fake_redis, account("x", 1))
    busy = lease(run(m.acquire("busy", JobSpec(prompt="x"))))
    # Tenant p: three jobs at priority 5 (turns 1, 2, 3), then an urgent one (turn 4); tenant q: one job at priority
    # 9 (turn 1.5): its turn comes after p's first, whatever p's priorities.
    low = [f"p5-{i}" for i in range(3)]
    for i, job in enumerate(low):
        _line_up(m, fake_redis, keys, job, JobSpec(prompt="x", tenant="p", priority=5), 1.0 + i)
    _line_up(m, fake_redis, keys, "q9", JobSpec(prompt="x", tenant="q", priority=9), 1.5)
    _line_up(m, fake_redis, keys, "p0", JobSpec(prompt="x", tenant="p", priority=0), 4.0)
    order: list[str] = []
    running = busy
    for _ in range(5):
        (handed,) = run(m.release(running))
        order.append(handed)
        tag = float(fake_redis.hget(keys.job(handed), "vtag") or 0)
        spec = JobSpec.model_validate_json(fake_redis.hget(keys.job(handed), "spec") or b"")
        running = lease(run(m.acquire(handed, spec, rank=tag)))
    # p's first turn serves its urgent job; q's job does not wait behind p's backlog (nor p's priority-0 job behind
    # q's priority-9 one: priority orders within a tenant); p's priority-5 jobs go in submit order, on p's turns.
    assert order == ["p0", "q9", *low]
    # The turns moved, the tags did not: the urgent job ran on turn 1, p's jobs of priority 5 on turns 2, 3, 4.
    assert [float(fake_redis.hget(keys.job(j), "vtag") or 0) for j in ["p0", *low]] == [1.0, 2.0, 3.0, 4.0]
    assert fake_redis.zcard(keys.tenant_line("p")) == 0 and fake_redis.zcard(keys.tenant_line("q")) == 0


def test_a_capped_tenants_job_waiting_for_a_slot_counts_toward_its_cap(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    m = manager(tenants_settings, fake_redis, account("x", 1))
    assert isinstance(run(m.acquire("other", JobSpec(prompt="x"))), SlotLease)  # the account is full
    spec = JobSpec(prompt="x", tenant="a")  # max_concurrency 2
    for job_id in ("a1", "a2"):
        waits = run(m.acquire(job_id, spec))
        assert isinstance(waits, NoAccount) and waits.accounts == ["x"]  # they wait in x's line
    # Two of a's jobs wait in line: a third is at a's cap and waits for one of a's runs, not in the accounts' lines
    # (else a's backlog would queue there past its cap and take the slots the cap leaves to other tenants).
    third = run(m.acquire("a3", spec))
    assert isinstance(third, NoAccount) and third.tenant == "a" and "max_concurrency" in third.reason


def test_a_freed_slot_goes_to_the_capped_tenants_waiter_when_it_ranks_first(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    keys = Keys(tenants_settings.key_prefix)
    m = manager(tenants_settings, fake_redis, account("x", 3))
    spec_a, spec_d = JobSpec(prompt="x", tenant="a"), JobSpec(prompt="x")
    runs = [
        lease(run(m.acquire("a1", spec_a))),
        lease(run(m.acquire("a2", spec_a))),
        lease(run(m.acquire("d1", spec_d))),
    ]
    # a's next job waits for one of a's runs (its cap, 2); another tenant's job waits in x's line, ranked after it.
    _deferred(fake_redis, keys, "a3", spec_a, tag=1.0)
    run(m.admission.add_tenant_waiter("a", "a3", 1.0))
    _deferred(fake_redis, keys, "d2", spec_d, tag=5.0)
    assert run(m.add_waiter(["x"], "d2", 5.0)) == []
    # a's run ends: its slot goes to a's waiter (ranked first), not to the job that happened to wait in the line.
    assert run(m.release(runs[0])) == ["a3"]
    assert fake_redis.hget(keys.job("a3"), "status") == b"queued"
    assert fake_redis.zscore(keys.account_slots("x"), "a3") is not None
    assert fake_redis.hget(keys.job("d2"), "status") == b"deferred"


def test_spend_caps_defer_or_fail_per_on_budget_and_runs_get_what_is_left(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    m = manager(tenants_settings, fake_redis, account("y", 8))
    store = TenantStore(fake_redis, Keys(tenants_settings.key_prefix), tenants_settings.tenants)
    spec = JobSpec(prompt="x", tenant="b", model="haiku", max_budget_usd=0.02)
    one = lease(run(m.acquire("j1", spec)))
    assert one.budget_usd == pytest.approx(0.02)
    # What one turn costs is not known yet: the first run goes alone and teaches it.
    first_alone = run(m.acquire("j2", spec))
    assert isinstance(first_alone, NoAccount) and not first_alone.permanent and "reserved" in first_alone.reason
    run(m.admission.settle(one, 0.004, turns=1))
    run(m.release(one))
    assert store.turn_cost("tenant", "b", "haiku") == pytest.approx(0.004)
    assert store.turn_cost("account", "y", "haiku") is None  # y has no spend cap: nothing reads it there
    # Each run reserves its budget and one turn beside it (the CLI may run a turn past its budget).
    two = lease(run(m.acquire("j2", spec)))
    assert two.budget_usd == pytest.approx(0.02)
    three = lease(run(m.acquire("j3", spec)))
    assert three.budget_usd == pytest.approx(0.05 - 0.004 - (0.02 + 0.004) - 0.004)  # never the same dollars twice
    reserved = run(m.acquire("j4", spec))
    # All that is left is reserved: wait for a run of the tenant to end, not for the window.
    assert isinstance(reserved, NoAccount) and not reserved.permanent and reserved.tenant == "b"
    assert "reserved" in reserved.reason
    assert store.spend("tenant", "b") == (pytest.approx(0.004), pytest.approx(0.004))
    assert store.spend("account", "y")[0] == pytest.approx(0.004)
    # Spent to within less than one turn of the cap: on_budget = "fail" fails the job as budget_exceeded.
    for done in (two, three):
        run(m.admission.settle(done, 0.021, turns=1))
        run(m.release(done))
    assert store.turn_cost("tenant", "b", "haiku") == pytest.approx(0.021)
    refused = run(m.acquire("j5", spec))
    assert isinstance(refused, NoAccount) and refused.permanent and refused.kind == "budget_exceeded"


def test_the_turn_estimate_rises_at_once_and_falls_slowly(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    store = TenantStore(fake_redis, Keys(tenants_settings.key_prefix), tenants_settings.tenants)
    run_call(store.settle_call(AttemptCost("b", "y", "j1", 0.03, model="haiku", turns=3)))
    assert store.turn_cost("tenant", "b", "haiku") == pytest.approx(0.01)
    run_call(store.settle_call(AttemptCost("b", "y", "j2", 0.02, model="haiku", turns=1)))
    assert store.turn_cost("tenant", "b", "haiku") == pytest.approx(0.02)
    # No turns reported: one turn.
    run_call(store.settle_call(AttemptCost("b", "y", "j3", 0.01, model="haiku", turns=None)))
    assert store.turn_cost("tenant", "b", "haiku") == pytest.approx((3 * 0.02 + 0.01) / 4)
    assert store.turn_cost("tenant", "b", "opus") is None  # per model
    assert store.turn_cost("tenant", "a", "haiku") is None  # per tenant


def test_a_waiting_tenant_defers_until_the_window_rolls(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    store = TenantStore(fake_redis, Keys(tenants_settings.key_prefix), tenants_settings.tenants)
    wait = TenantConfig(name="w", max_cost_usd_per_hour=1.0)
    now = 7200.0 * 1000 + 1800  # half past some hour
    fake_redis.hset(Keys(tenants_settings.key_prefix).tenant_spend("w"), hour_field(now), "1.0")
    over = run_call(store.admit_call(wait, "j1", 15, None, now))
    assert isinstance(over, OverBudget) and over.window == "hour"
    assert over.until.timestamp() == 7200.0 * 1000 + 3600
    assert isinstance(run_call(store.admit_call(wait, "j1", 15, None, now + 1800)), Admitted)  # the next hour


def test_account_caps_route_around_a_spent_account_then_wait(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    m = manager(fake_settings, fake_redis, account("p", 4, max_cost_usd_per_hour=0.01), account("q", 4))
    keys = Keys(fake_settings.key_prefix)
    fake_redis.hset(keys.account_spend("p"), hour_field(time.time()), "0.01")
    got = lease(run(m.acquire("j1", JobSpec(prompt="x", account=None))))
    assert got.account.name == "q"
    pinned = run(m.acquire("j2", JobSpec(prompt="x", account="p")))
    assert isinstance(pinned, NoAccount) and not pinned.permanent and "spend cap" in pinned.reason
    assert fake_redis.zscore(keys.account_slots("p"), "j2") is None  # the slot went back at once


def test_an_account_cap_clamps_the_run_budget(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> None:
    m = manager(fake_settings, fake_redis, account("p", 4, max_cost_usd_per_day=0.03))
    first = lease(run(m.acquire("j1", JobSpec(prompt="x", max_budget_usd=1.0))))
    assert first.budget_usd == pytest.approx(0.03)
    waits = run(m.acquire("j2", JobSpec(prompt="x", max_budget_usd=1.0)))  # all reserved: wait for the account's run
    assert isinstance(waits, NoAccount) and waits.accounts == ["p"] and not waits.permanent
    run(m.admission.settle(first, 0.01, turns=4))  # one turn: $0.0025
    run(m.release(first))
    # Runs without a budget of their own share what is left, less one turn, with the slots that may still start
    # beside them; each reserves its share and a turn.
    shared = [lease(run(m.acquire(f"k{i}", JobSpec(prompt="x")))) for i in range(2)]
    turn = 0.0025
    assert shared[0].budget_usd == pytest.approx((0.02 - turn) / 4)
    assert shared[1].budget_usd == pytest.approx((0.02 - (0.02 - turn) / 4 - turn - turn) / 3)


def test_fair_share_tags_give_slots_by_weight(tenants_settings: Settings, fake_redis: fakeredis.FakeRedis) -> None:
    store = TenantStore(fake_redis, Keys(tenants_settings.key_prefix), tenants_settings.tenants)
    a = TenantConfig(name="a", weight=3)
    b = TenantConfig(name="b", weight=1)
    keys = Keys(tenants_settings.key_prefix)
    for job in [*(f"a{i}" for i in range(30)), *(f"b{i}" for i in range(10))]:
        fake_redis.hset(keys.job(job), "status", "queued")
    tags = [(run_call(store.tag_call(a, f"a{i}")), "a") for i in range(30)] + [
        (run_call(store.tag_call(b, f"b{i}")), "b") for i in range(10)
    ]
    first = [who for _, who in sorted(tags)[:20]]
    assert first.count("a") == 15 and first.count("b") == 5  # 3:1 while both wait
    assert run_call(store.tag_call(a, "a0")) == tags[0][0]  # issued once
    # An idle tenant banks nothing: after the fleet moved on, its next tag starts from the fleet's virtual time.
    run_call(store.advance_call(9.0))
    assert run_call(store.tag_call(b, "b-late")) == pytest.approx(11.0)


def test_a_backlogged_tenants_messages_wait_behind_other_tenants_in_the_broker(
    tenants_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    from claudeq.broker import list_for
    from claudeq.producer.client import TENANT_BACKLOG, Client

    client = Client(tenants_settings, redis_client=fake_redis, celery_app=object())
    queue = tenants_settings.queue
    client.submit_many([{"prompt": f"a {i}", "tenant": "a"} for i in range(TENANT_BACKLOG - 1)])
    assert fake_redis.llen(list_for(queue, 0)) == TENANT_BACKLOG - 1
    flood = client.submit_many([{"prompt": f"a more {i}", "tenant": "a"} for i in range(5)])
    late = client.submit(prompt="b's", tenant="b", model="haiku")
    assert fake_redis.llen(list_for(queue, 9)) == 5  # past the backlog: the last priority step
    assert fake_redis.llen(list_for(queue, 0)) == TENANT_BACKLOG  # b's job is picked up before a's flood
    assert client.get(flood[0].id).spec.priority == 0  # its place in the waiting line is unchanged
    assert late.id.encode() in fake_redis.lindex(list_for(queue, 0), 0)  # type: ignore[operator]


def test_without_a_tenants_file_runs_are_not_indexed_per_tenant_and_spend_is_still_tallied(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    # No tenants file: nothing caps a tenant, so a run costs no tenant bookkeeping; `claudeq tenants` shows
    # `default` from the status counters, and its spend is still tallied.
    accounts = manager(fake_settings, fake_redis, account("x"))
    keys = Keys(fake_settings.key_prefix)
    lease = run(accounts.acquire("j1", JobSpec(prompt="p")))
    assert isinstance(lease, SlotLease) and lease.budget_usd is None and lease.tenant is None
    budgeted = run(accounts.acquire("j2", JobSpec(prompt="p", max_budget_usd=0.5)))
    assert isinstance(budgeted, SlotLease) and budgeted.budget_usd == 0.5  # the spec's own budget, as before
    run(accounts.admission.settle(lease, 0.25))
    assert run(accounts.release(lease)) == []
    run(accounts.admission.job_done("default", "j1"))
    for key in (keys.tenant_runs, keys.tenant_reserved, keys.tenant_jobs, keys.tenant_waiters):
        assert not fake_redis.exists(key("default"))
    assert accounts.tenant_store.spend("tenant", "default") == (0.25, 0.25)
    assert accounts.tenant_store.spend("account", "x") == (0.25, 0.25)
    fake_redis.zadd(keys.running, {"r1": time.time() + 60, "r2": time.time() + 60})
    fake_redis.zadd(keys.queued, {f"q{i}": i for i in range(5)})
    fake_redis.zadd(keys.deferred, {"d1": 1})
    (usage,) = accounts.tenant_store.usage()
    assert (usage.name, usage.in_flight, usage.waiting, usage.spend.hour) == ("default", 2, 6, 0.25)


def test_an_uncapped_tenant_in_a_tenants_file_is_counted_without_reserving(
    unique: str, tmp_path: Path, fake_redis: fakeredis.FakeRedis
) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenants]]\nname = "c"\n')
    settings = make_settings("redis://127.0.0.1:1/0", unique, tenants_file=path)
    accounts = manager(settings, fake_redis, account("x"))
    keys = Keys(settings.key_prefix)
    lease = run(accounts.acquire("j1", JobSpec(prompt="p", tenant="c", max_budget_usd=0.5)))
    assert isinstance(lease, SlotLease) and lease.tenant == "c" and lease.budget_usd == 0.5
    assert fake_redis.zscore(keys.tenant_runs("c"), "j1") is not None
    assert not fake_redis.exists(keys.tenant_reserved("c"))
    assert accounts.tenant_store.usage()[0].in_flight == 1
    run(accounts.admission.settle(lease, 0.1))
    run(accounts.release(lease))
    assert fake_redis.zscore(keys.tenant_runs("c"), "j1") is None
    assert accounts.tenant_store.spend("tenant", "c") == (0.1, 0.1)


def test_the_spend_expiry_is_set_with_the_first_cost_of_each_hour(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    store = TenantStore(fake_redis, Keys(fake_settings.key_prefix), fake_settings.tenants)
    key = Keys(fake_settings.key_prefix).tenant_spend("default")
    now = 1_800_000_000.0
    run_call(store.settle_call(AttemptCost("default", "x", "j1", 0.01), now=now))
    assert 0 < fake_redis.ttl(key) <= SPEND_TTL_S
    fake_redis.expire(key, 1000)  # as if most of it had run down
    run_call(store.settle_call(AttemptCost("default", "x", "j2", 0.02), now=now + 60))  # same hour: the expiry stands
    assert fake_redis.ttl(key) <= 1000
    run_call(store.settle_call(AttemptCost("default", "x", "j3", 0.04), now=now + 3600))  # a new hour: set again
    assert fake_redis.ttl(key) > 1000
    assert store.spend("tenant", "default", now + 3600) == (pytest.approx(0.04), pytest.approx(0.07))


def test_an_uncapped_accounts_spend_is_one_increment_per_attempt_with_the_same_expiry_and_windows(
    fake_settings: Settings, fake_redis: fakeredis.FakeRedis
) -> None:
    # No tenants file, an account without a spend cap: nothing reads a turn estimate there, so an attempt's cost is
    # one HINCRBYFLOAT of its hour (the day is the sum of its hours, read at once).
    keys = Keys(fake_settings.key_prefix)
    store = TenantStore(fake_redis, keys, fake_settings.tenants, accounts=["x"])
    key = keys.account_spend("x")
    now = 1_800_000_000.0  # 08:00 UTC: the next hour is the same day
    run_call(store.settle_call(AttemptCost(None, "x", "j1", 0.01, reserved=False, account_capped=False), now=now))
    assert 0 < fake_redis.ttl(key) <= SPEND_TTL_S
    fake_redis.expire(key, 1000)
    same_hour = AttemptCost(None, "x", "j2", 0.02, reserved=False, account_capped=False)
    run_call(store.settle_call(same_hour, now=now + 60))
    assert fake_redis.ttl(key) <= 1000
    run_call(
        store.settle_call(AttemptCost(None, "x", "j3", 0.04, reserved=False, account_capped=False), now=now + 3600)
    )  # a new hour
    assert fake_redis.ttl(key) > 1000
    assert store.spend("account", "x", now + 3600) == (pytest.approx(0.04), pytest.approx(0.07))
    assert store.spend("tenant", "default", now + 3600) == (pytest.approx(0.04), pytest.approx(0.07))
    assert store.turn_cost("account", "x") is None
    assert not fake_redis.exists(keys.tenant_spend("default"))
    assert store.spend("account", "x", now + 86400) == (0.0, 0.0)  # the next day starts at nothing
