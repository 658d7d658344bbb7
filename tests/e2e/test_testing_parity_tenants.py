"""claudeq.testing against the real thing on the other half of the fleet's rules: API-key accounts (plain 429s
with `retry-after`, no unified windows) and a tenant's hourly budget in both `on_budget` modes. The same jobs go
through real `claudeq-worker` processes with the real CLI and the simulator, and through the kit; the records must
agree field by field (tests/e2e/test_testing_parity.py says which fields)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import TERMINAL, JobRecord
from claudeq.producer.client import Client
from claudeq.testing import auth_failed, fleet
from claudeq.testing.fleet import TOKEN_ENV
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.e2e.test_testing_parity import COMMON, KNOBS, RATE_LIMITED, Scenario, differences, shape, through_the_kit
from tests.e2e.test_testing_parity import through_the_worker as _through_the_worker
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e

#: Each run of the budget scenarios reports this many input tokens: a cost well above the cap below.
COSTLY = "[[sim: tokens in=6000]] [[sim: text ok]]"
#: The tenants' hourly cap: one costly run passes it.
CAP_USD = 0.01
TENANTS = {
    "tenants": [
        {"name": "default"},
        {"name": "strict", "max_cost_usd_per_hour": CAP_USD, "on_budget": "fail"},
        {"name": "thrifty", "max_cost_usd_per_hour": CAP_USD, "on_budget": "wait"},
    ]
}


#: With an API key the CLI asks once per attempt (with an OAuth token twice, test_testing_parity.AUTH_FAILED): one 401.
AUTH_FAILED: list[Scenario] = [("[[sim: error 401 times=1]] bad key", [auth_failed()], {})]


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("a", kind="api_key", max_concurrency=4), SimAccount("b", kind="api_key", max_concurrency=4)]


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    lines = []
    for tenant in TENANTS["tenants"]:
        lines.append("[[tenants]]")
        lines += [f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in tenant.items()]
    tenants.write_text("\n".join(lines).replace("'", '"') + "\n")
    return make_settings(redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, **FAST_E2E)


def api_keys() -> list[AccountConfig]:
    return [AccountConfig(name=n, kind="api_key", token_env=TOKEN_ENV, max_concurrency=4) for n in ("a", "b")]


@pytest.mark.parametrize("scenarios", [COMMON, RATE_LIMITED, AUTH_FAILED], ids=["common", "429", "401"])
def test_api_key_accounts_give_the_same_records(
    scenarios: list[Scenario], client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    real = _through_the_worker(scenarios, client, workers)
    kit = through_the_kit(scenarios, settings, accounts=api_keys())
    differ = differences(scenarios, kit, real)
    assert not differ, differ


def budget_shape(record: JobRecord) -> dict[str, Any]:
    spent = sum(a.usage.cost_usd for a in record.attempts if a.usage is not None)
    return {**shape(record), "tenant": record.spec.tenant, "spent_past_cap": spent > CAP_USD}


@pytest.mark.parametrize("tenant", ["strict", "thrifty"])
def test_a_tenant_over_its_budget_fails_or_waits_the_same_way(
    tenant: str, client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    """A first costly job runs with the tenant's cap as its budget and spends past it (the CLI stops it with
    `error_max_budget_usd`: kind `job`); the second then fails with kind `budget_exceeded` (`on_budget = "fail"`) or is
    deferred to the next hour (`"wait"`), in both fleets."""
    workers()
    first = client.wait(client.submit(prompt=COSTLY, tenant=tenant).id, timeout=120, poll_s=0.1)
    second = client.submit(prompt=COSTLY, tenant=tenant)
    real_second = client.wait(second.id, timeout=120, poll_s=0.1) if tenant == "strict" else _settled(client, second.id)
    real = [budget_shape(first), budget_shape(real_second)]

    cost = first.result.usage.cost_usd if first.result else 0.0  # the kit's run costs what the simulator's did
    with fleet(accounts=api_keys(), tenants=TENANTS, **{k: getattr(settings, k) for k in KNOBS}) as f:
        f.reply(re.escape(COSTLY), text="ok", usage={"input_tokens": 6000, "output_tokens": 2, "cost_usd": cost})
        kit_first = f.client.submit(prompt=COSTLY, tenant=tenant).wait()
        kit_second = f.client.submit(prompt=COSTLY, tenant=tenant)
        if tenant == "strict":
            kit_record = kit_second.wait()
        else:
            f.run_until_idle(advance=False)  # deferred to the end of the hour: the clock is not moved there
            kit_record = kit_second.record()
        kit = [budget_shape(kit_first), budget_shape(kit_record)]
    assert kit == real
    assert real[0]["error_kind"] == "job"
    assert (real[1]["status"], real[1]["error_kind"]) == (
        ("failed", "budget_exceeded") if tenant == "strict" else ("deferred", None)
    )


def _settled(client: Client, job_id: str) -> JobRecord:
    """The record once the worker has deferred the job (or it ended), within 60 s."""
    deadline = time.monotonic() + 60
    record = client.get(job_id)
    while record.status not in ("deferred", *TERMINAL) and time.monotonic() < deadline:
        time.sleep(0.1)
        record = client.get(job_id)
    return record
