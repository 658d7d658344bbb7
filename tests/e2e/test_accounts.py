"""End to end: rate-limit-aware scheduling across accounts with real workers, the real CLI and the simulator.

The simulator's windows are short (seconds) and start at their first request; `used_requests` puts an account past
its limit from the start. OAuth accounts get the unified `rejected` 429 with a reset, so the CLI emits a
RateLimitEvent `rejected` with `resets_at` and the worker cools the account until then.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from claudeq.accounts import AccountStore
from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobRecord
from claudeq.producer.cli_accounts import accounts_app
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount, write_accounts_toml

pytestmark = pytest.mark.e2e

SONNET = "claude-sonnet-4-5"
HAIKU = "claude-haiku-4-5"


def configure(simulator: Any, accounts: list[SimAccount], **per_account: dict[str, Any]) -> None:
    """Give the simulator's accounts windows / auth failures (`per_account[name]` = extra account fields)."""
    simulator.configure(
        {
            "accounts": [
                {"name": a.name, "token": a.token_value, "kind": a.kind, **per_account.get(a.name, {})}
                for a in accounts
            ]
        }
    )


def exhausted(length_s: float, requests: int = 3) -> dict[str, Any]:
    """An account already past its limit: the first request is rejected and starts a window of `length_s`."""
    return {"windows": [{"family": "5h", "length_s": length_s, "requests": requests, "used_requests": requests}]}


def account_store(settings: Settings, redis_client: redis.Redis) -> AccountStore:
    return AccountStore(redis_client, Keys(settings.key_prefix), settings.accounts)


def wait_all(client: Client, ids: list[str], timeout: float) -> list[JobRecord]:
    return [client.wait(job_id, timeout=timeout, poll_s=0.2) for job_id in ids]


def sim_account(simulator: Any, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = simulator.stats()["accounts"].get(name, {"requests": 0, "rejected": 0})
    return stats


class TestOneAccountPastItsLimit:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("a", max_concurrency=2), SimAccount("b", max_concurrency=2)]

    def test_every_job_succeeds_on_the_other_account_and_the_limited_one_is_not_hammered(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        accounts: list[SimAccount],
        settings: Settings,
        redis_client: redis.Redis,
    ) -> None:
        configure(simulator, accounts, a=exhausted(120))
        workers()
        workers()
        ids = [client.submit(prompt=f"[[sim: text done-{i}]] job {i}").id for i in range(8)]
        records = wait_all(client, ids, timeout=120)
        assert [r.status for r in records] == ["succeeded"] * 8, [r.error for r in records]
        assert all(r.account == "b" for r in records)
        a = sim_account(simulator, "a")
        # Only the requests in flight when the limit hit (at most max_concurrency), none once it cooled.
        assert a["rejected"] <= 2
        assert a["requests"] == a["rejected"]
        outcomes = [x.outcome for r in records for x in r.attempts]
        assert outcomes.count("rate_limited") == a["rejected"]
        assert outcomes.count("success") == 8
        state = account_store(settings, redis_client).state("a")
        assert state.state == "cooling"
        assert state.windows["five_hour"].status == "rejected"


class TestAllAccountsCooling:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("a", max_concurrency=1), SimAccount("b", max_concurrency=1), SimAccount("c")]

    @pytest.fixture
    def accounts_file(self, tmp_path: Path, accounts: list[SimAccount], simulator: Any) -> Path:
        # a and b take the SONNET jobs; c only runs HAIKU, so the SONNET jobs can only wait for a or b.
        path = write_accounts_toml(tmp_path / "accounts.toml", accounts, simulator.base_url)
        text = path.read_text().replace('name = "c"\n', f'name = "c"\nmodels = ["{HAIKU}"]\n')
        for name in ("a", "b"):
            text = text.replace(f'name = "{name}"\n', f'name = "{name}"\nmodels = ["{SONNET}"]\n')
        path.write_text(text)
        return path

    def test_jobs_defer_without_holding_a_slot_and_run_when_the_window_resets(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        accounts: list[SimAccount],
        settings: Settings,
        redis_client: redis.Redis,
    ) -> None:
        window_s = 25.0  # long enough that both jobs are deferred together on a loaded machine
        configure(simulator, accounts, a=exhausted(window_s), b=exhausted(window_s + 4))
        workers(concurrency=1)
        waiting = [client.submit(prompt=f"[[sim: text later-{i}]] wait {i}", model=SONNET).id for i in range(2)]
        run_until(lambda: all(client.get(j).status == "deferred" for j in waiting), 60, 0.2, what="both jobs deferred")
        store = account_store(settings, redis_client)
        states = {s.name: s for s in store.states()}
        assert states["a"].state == states["b"].state == "cooling"
        assert states["a"].slots_in_use == states["b"].slots_in_use == 0
        first_reset = min(s.cooldown_until for s in (states["a"], states["b"]) if s.cooldown_until)

        # The only worker has one slot and the deferred jobs do not hold it: a job for c runs at once.
        pinned = client.submit(prompt="[[sim: text now]] right away", account="c", model=HAIKU)
        record = client.wait(pinned.id, timeout=30, poll_s=0.1)
        assert record.status == "succeeded", record.error
        assert record.finished_at is not None and record.finished_at < first_reset
        assert all(client.get(j).status == "deferred" for j in waiting)

        records = wait_all(client, waiting, timeout=90)
        assert [r.status for r in records] == ["succeeded"] * 2, [r.error for r in records]
        for r in records:
            assert r.finished_at is not None and r.finished_at >= first_reset
            # The first job met the rejections; the second found every account cooling and was deferred at once.
            assert [a.outcome for a in r.attempts].count("success") == 1
            assert "deferred" in [e.type for e in client.events(r.id)]
        assert "rate_limited" in [a.outcome for r in records for a in r.attempts]
        assert sim_account(simulator, "a")["rejected"] + sim_account(simulator, "b")["rejected"] <= 2 + 2


class TestAuthFailure:
    def test_401_disables_the_account_the_job_reruns_elsewhere_and_an_operator_enables_it(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        accounts: list[SimAccount],
        settings: Settings,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
    ) -> None:
        configure(simulator, accounts, a={"auth_fail": True})
        workers()
        job = client.submit(prompt="[[sim: text rescued]] hello")
        record = client.wait(job.id, timeout=60, poll_s=0.1)
        assert record.status == "succeeded", record.error
        assert [(a.account, a.outcome) for a in record.attempts] == [("a", "auth_failed"), ("b", "success")]

        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("CLAUDEQ_REDIS_URL", settings.redis_url)
        monkeypatch.setenv("CLAUDEQ_KEY_PREFIX", settings.key_prefix)
        monkeypatch.setenv("CLAUDEQ_ACCOUNTS_FILE", str(settings.accounts_file))
        runner = CliRunner()
        shown = {row["name"]: row for row in json.loads(runner.invoke(accounts_app, ["--json"]).output)}
        assert shown["a"]["state"] == "disabled"
        assert "auth" in shown["a"]["reason"].lower() or "401" in shown["a"]["reason"]
        assert shown["b"]["state"] == "ok"

        # Later jobs never go to the disabled account.
        before = sim_account(simulator, "a")["requests"]
        second = client.submit(prompt="[[sim: text again]] again")
        assert client.wait(second.id, timeout=60, poll_s=0.1).account == "b"
        assert sim_account(simulator, "a")["requests"] == before

        configure(simulator, accounts)  # the credential was fixed
        assert runner.invoke(accounts_app, ["enable", "a"]).exit_code == 0
        assert json.loads(runner.invoke(accounts_app, ["--json"]).output)[0]["state"] == "ok"
        pinned = client.submit(prompt="[[sim: text back]] back", account="a")
        record = client.wait(pinned.id, timeout=60, poll_s=0.1)
        assert record.status == "succeeded" and record.account == "a"


class TestConcurrencyLimit:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("a", max_concurrency=1), SimAccount("b", max_concurrency=2)]

    def test_three_racing_workers_never_exceed_an_accounts_max_concurrency(
        self, client: Client, workers: WorkerFactory, simulator: Any, accounts: list[SimAccount]
    ) -> None:
        # Slow answers so runs overlap and every worker competes for the same slots.
        configure(simulator, accounts, a={"ttft_s": 1.0}, b={"ttft_s": 1.0})
        for _ in range(3):
            workers(concurrency=2)
        ids = [client.submit(prompt=f"[[sim: text r{i}]] race {i}").id for i in range(9)]
        records = wait_all(client, ids, timeout=180)
        assert [r.status for r in records] == ["succeeded"] * 9, [r.error for r in records]
        stats = simulator.stats()["accounts"]
        assert stats["a"]["max_in_flight"] <= 1
        assert stats["b"]["max_in_flight"] <= 2
        assert stats["a"]["requests"] + stats["b"]["requests"] >= 9
        assert {r.account for r in records} == {"a", "b"}


class TestDeadWorkerSlot:
    def test_a_killed_workers_slot_frees_within_the_lease_ttl(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
    ) -> None:
        worker = workers()
        job = client.submit(prompt="[[sim: stall 60]] hold the slot", account="a", idle_timeout_s=120)
        store = account_store(settings, redis_client)
        run_until(lambda: job.id in store.slot_holders("a"), 60, 0.1, what="slot held")
        worker.kill()
        killed = time.monotonic()
        run_until(lambda: store.state("a").slots_in_use == 0, settings.lease_ttl_s + 5, 0.1, what="slot freed")
        assert time.monotonic() - killed <= settings.lease_ttl_s + 1.5
        # Another job gets the slot at once.
        workers()
        other = client.submit(prompt="[[sim: text free]] after", account="a")
        assert client.wait(other.id, timeout=60, poll_s=0.1).status == "succeeded"
