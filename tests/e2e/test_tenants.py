"""Tenants end to end, through real worker processes, the real CLI and the simulator: a tenant's concurrency cap,
both `on_budget` modes, account spend caps, and the per-run budget clamp."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.tenants import TenantStore, hour_field, window_end
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e

#: Each run reports this many input tokens: its cost is then well above a cent at any model's price, so a cap of a
#: few cents is reached in a few runs.
COSTLY = "[[sim: tokens in=6000]] [[sim: text ok]]"

TENANTS = """
[[tenants]]
name = "default"

[[tenants]]
name = "solo"
max_concurrency = 1

[[tenants]]
name = "thrifty"
max_cost_usd_per_hour = {cap}
on_budget = "wait"

[[tenants]]
name = "strict"
max_cost_usd_per_hour = {cap}
on_budget = "fail"

[[tenants]]
name = "tight"
max_cost_usd_per_hour = {cap}
on_budget = "wait"

[[tenants]]
name = "haiku-only"
models = ["haiku"]
"""


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [
        SimAccount("wide", kind="api_key", max_concurrency=4),
        SimAccount("capped", kind="api_key", max_concurrency=4),
    ]


@pytest.fixture
def cost_cap() -> float:
    """The cap of `thrifty` and `strict` per hour: a little above one costly run (measured in the test)."""
    return 0.05


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path, cost_cap: float) -> Settings:
    text = accounts_file.read_text().replace('name = "capped"', 'name = "capped"\nmax_cost_usd_per_hour = 0.02')
    accounts_file.write_text(text)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS.format(cap=cost_cap))
    return make_settings(redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, **FAST_E2E)


def done(client: Client, job_id: str, timeout: float = 120) -> JobRecord:
    return client.wait(job_id, timeout=timeout, poll_s=0.2)


def near_hour_end() -> bool:
    """Whether the current calendar hour ends within two minutes (a window would roll mid-test)."""
    now = time.time()
    return window_end("hour", now).timestamp() - now < 120


def test_a_tenant_never_runs_more_than_its_max_concurrency(client: Client, workers: WorkerFactory, unique: str) -> None:
    workers(concurrency=4)
    solo = [
        client.submit(prompt=f"[[sim: delay 1]] [[sim: text s]] solo {i} {unique}", tenant="solo") for i in range(3)
    ]
    other = client.submit(prompt=f"[[sim: delay 1]] [[sim: text o]] other {unique}", account="wide")
    records = [done(client, j.id) for j in [*solo, other]]
    assert all(r.status == "succeeded" for r in records), [r.error for r in records]
    runs = sorted((a.started_at, a.finished_at) for r in records[:3] for a in r.attempts if a.outcome == "success")
    assert len(runs) == 3
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert end is not None and start >= end, "two runs of a max_concurrency = 1 tenant overlapped"
    # The other tenant was not held back: its run overlapped one of solo's.
    (o_start, o_end) = next((a.started_at, a.finished_at) for a in records[3].attempts if a.outcome == "success")
    assert any(o_start < end and start < o_end for start, end in runs if end is not None and o_end is not None)
    # The waiters were deferred for the cap, not failed, and the cap's reason was recorded.
    reasons = [e.data.get("reason", "") for j in solo for e in client.events(j.id) if e.type == "deferred"]
    assert reasons and all("max_concurrency" in r for r in reasons)


def test_spend_caps_wait_or_fail_and_runs_start_with_what_is_left(
    client: Client, workers: WorkerFactory, unique: str, settings: Settings, cost_cap: float
) -> None:
    if near_hour_end():
        time.sleep(window_end("hour", time.time()).timestamp() - time.time() + 1)
    workers(concurrency=1)
    store = TenantStore(client.store.redis, client.store.keys, settings.tenants)
    # One run measures what a costly run costs here.
    probe = done(client, client.submit(prompt=f"{COSTLY} probe {unique}", account="wide").id)
    assert probe.status == "succeeded", probe.error
    cost = probe.result.usage.cost_usd if probe.result else 0.0
    assert cost_cap / 4 < cost < cost_cap, f"a costly run cost {cost}; adjust COSTLY"

    # on_budget = "wait": runs go until the cap is reached, then the next job waits for the next hour.
    budget = cost_cap / 2
    thrifty = [
        client.submit(prompt=f"{COSTLY} thrifty {i} {unique}", tenant="thrifty", account="wide", max_budget_usd=budget)
        for i in range(6)
    ]
    run_until(
        lambda: (
            sum(1 for j in thrifty if client.get(j.id).status == "deferred") >= 1
            and all(client.get(j.id).status in ("deferred", "succeeded", "failed") for j in thrifty)
        ),
        120,
        what="thrifty's jobs ran until its cap and the rest waited",
    )
    records = [client.get(j.id) for j in thrifty]
    ran = [r for r in records if r.attempts and r.attempts[0].outcome is not None]
    spent = sum(r.result.usage.cost_usd for r in ran if r.result)
    hour, _ = store.spend("tenant", "thrifty")
    assert hour == pytest.approx(spent, rel=1e-6)
    assert spent <= cost_cap + budget  # the cap, overshot by at most one run's budget
    # Every run started with what was left, never more than its own budget.
    assert all((a.budget_usd or budget) <= budget + 1e-9 for r in ran for a in r.attempts)
    waiting = [r for r in records if r.status == "deferred"]
    assert waiting
    next_hour = window_end("hour", time.time())
    for record in waiting:
        assert record.ready_at is not None and abs((record.ready_at - next_hour).total_seconds()) < 1
        events = [e for e in client.events(record.id) if e.type == "deferred"]
        assert "spend cap" in str(events[-1].data.get("reason"))
    for record in waiting:
        client.cancel(record.id)

    # on_budget = "fail": once the cap is spent the next job fails as budget_exceeded, without running.
    client.store.redis.hset(client.store.keys.tenant_spend("strict"), hour_field(time.time()), repr(cost_cap))
    failed = done(client, client.submit(prompt=f"{COSTLY} strict {unique}", tenant="strict").id)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.kind == "budget_exceeded"
    assert failed.attempts == []


def test_runs_with_a_budget_below_one_turn_never_take_the_tenant_past_its_cap(
    client: Client, workers: WorkerFactory, unique: str, cost_cap: float
) -> None:
    """Each run's budget ($0.02) is below what its one turn costs (~$0.024): the CLI checks its budget only after a
    turn, so every run spends a whole turn whatever its budget. Runs started side by side on what is left must not
    take the tenant past its cap by more than one run's budget."""
    if near_hour_end():
        time.sleep(window_end("hour", time.time()).timestamp() - time.time() + 1)
    workers(concurrency=3)
    budget = 0.02
    jobs = [
        client.submit(
            prompt=f"[[sim: delay 1]] {COSTLY} tight {i} {unique}",
            tenant="tight",
            account="wide",
            max_budget_usd=budget,
        )
        for i in range(6)
    ]
    run_until(
        lambda: (
            sum(1 for j in jobs if client.get(j.id).status == "deferred") >= 1
            and all(client.get(j.id).status in ("deferred", "succeeded", "failed") for j in jobs)
        ),
        120,
        what="tight's jobs ran until its cap and the rest waited",
    )
    records = [client.get(j.id) for j in jobs]
    costs = [r.result.usage.cost_usd for r in records if r.result and r.attempts]
    assert costs and min(costs) > budget, f"a run cost {costs}: it must cost more than its budget for this test"
    spent = sum(costs)
    assert spent <= cost_cap + budget, f"spent ${spent:.4f} > cap ${cost_cap} + one run's budget ${budget}"
    for record in records:
        if record.status == "deferred":
            client.cancel(record.id)


def test_a_run_is_clamped_to_what_its_tenant_has_left(
    client: Client, workers: WorkerFactory, unique: str, cost_cap: float
) -> None:
    if near_hour_end():
        time.sleep(window_end("hour", time.time()).timestamp() - time.time() + 1)
    workers(concurrency=1)
    # thrifty has a little left this hour: a job asking for a large budget starts with only that.
    left = 0.003
    client.store.redis.hset(client.store.keys.tenant_spend("thrifty"), hour_field(time.time()), repr(cost_cap - left))
    job = client.submit(
        prompt=f'{COSTLY} [[sim: tool Read {{"file_path": "/etc/hostname"}}]] clamp {unique}',
        tenant="thrifty",
        account="wide",
        max_budget_usd=5.0,
        tools="read-only",
    )
    record = done(client, job.id)
    first = record.attempts[0]
    assert first.budget_usd == pytest.approx(left, rel=1e-6)
    # The CLI stopped at its budget (error_max_budget_usd) after the first costly turn: the job failed as `job`.
    assert record.status == "failed" and record.error is not None and record.error.kind == "job", record.error
    assert "budget" in record.error.message


def test_an_account_over_its_cap_is_routed_around_then_waited_for(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    if near_hour_end():
        time.sleep(window_end("hour", time.time()).timestamp() - time.time() + 1)
    workers(concurrency=2)
    client.store.redis.hset(client.store.keys.account_spend("capped"), hour_field(time.time()), "0.02")
    routed = done(client, client.submit(prompt=f"[[sim: text r]] routed {unique}").id)
    assert routed.status == "succeeded" and routed.account == "wide"
    pinned = client.submit(prompt=f"[[sim: text p]] pinned {unique}", account="capped")
    run_until(lambda: client.get(pinned.id).status == "deferred", 60, what="the job pinned to a spent account waits")
    record = client.get(pinned.id)
    assert record.attempts == []
    assert record.ready_at is not None
    assert abs((record.ready_at - window_end("hour", time.time())).total_seconds()) < 1
    assert "spend cap" in str([e.data for e in client.events(pinned.id) if e.type == "deferred"][-1].get("reason"))
    client.cancel(pinned.id)


def test_a_fallback_model_outside_the_tenants_models_is_refused_at_submit(
    client: Client, redis_client: redis.Redis, settings: Settings, unique: str
) -> None:
    """The CLI answers on `fallback_model` by itself (after 529s with its own retries on): a tenant allowed only
    haiku asking for an opus fallback is refused at submit, naming the field, and nothing is written."""
    with pytest.raises(JobSpecError) as refused:
        client.submit(prompt=f"fallback {unique}", tenant="haiku-only", model="haiku", fallback_model="opus")
    assert [field for field, _ in refused.value.errors] == ["fallback_model"]
    assert "opus is not allowed for tenant 'haiku-only'" in refused.value.errors[0][1]
    assert redis_client.zcard(f"{settings.key_prefix}jobs") == 0
    allowed = client.submit(prompt=f"allowed {unique}", tenant="haiku-only", model="haiku", fallback_model="haiku")
    assert client.get(allowed.id).spec.fallback_model == "haiku"
    client.cancel(allowed.id)


def test_the_worker_refuses_a_fallback_model_its_tenant_may_not_use(
    workers: WorkerFactory, settings: Settings, simulator: Any, unique: str
) -> None:
    """A producer that skipped the check (no tenants file of its own) gets the job queued; the worker checks the
    spec again before a run, fails it as `input` naming `fallback_model`, and no request reaches the API: the run
    never starts, so 529s (with the CLI's retries on) cannot make it answer on opus."""
    unchecked = Client(settings.model_copy(update={"tenants_file": None}))
    try:
        job = unchecked.submit(
            prompt=f"[[sim: error 529]] fallback {unique}", tenant="haiku-only", model="haiku", fallback_model="opus"
        )
        workers(concurrency=1, cli_max_retries=3)
        record = done(unchecked, job.id)
    finally:
        unchecked.close()
    assert record.status == "failed" and record.error is not None and record.error.kind == "input", record.error
    assert "fallback_model: opus is not allowed" in record.error.message
    assert record.attempts == []
    assert simulator.requests() == []
