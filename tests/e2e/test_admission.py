"""Window-aware admission end to end: real worker processes, the real CLI, the simulator's unified headers.

- a window at its utilization ceiling reserves the account (`claudeq accounts` says which window and until when)
  and jobs go to the other account; the simulator serves no request beyond the ceiling;
- a model family's own weekly window (`seven_day_opus`) that rejects holds back only opus jobs on the account;
- predictive admission stops before the window is used up: no request is rejected;
- after a reservation ends at the window's reset, waiting jobs start at the configured ramp, not all at once.
"""

from __future__ import annotations

import itertools
import json
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
from tests.support.worker_proc import SimAccount, settings_env

pytestmark = pytest.mark.e2e

OPUS = "claude-opus-4-1"
SONNET = "claude-sonnet-4-5"


def configure(simulator: Any, accounts: list[SimAccount], windows: dict[str, list[dict[str, Any]]]) -> None:
    simulator.configure(
        {
            "accounts": [
                {"name": a.name, "token": a.token_value, "kind": a.kind, "windows": windows.get(a.name, [])}
                for a in accounts
            ]
        }
    )


def store(settings: Settings, redis_client: redis.Redis) -> AccountStore:
    return AccountStore(redis_client, Keys(settings.key_prefix), settings.accounts)


def main_requests(simulator: Any, account: str) -> list[dict[str, Any]]:
    return [e for e in simulator.requests() if e.get("account") == account and e.get("kind") == "main"]


def wait_all(client: Client, ids: list[str], timeout: float) -> list[JobRecord]:
    return [client.wait(job_id, timeout=timeout, poll_s=0.2) for job_id in ids]


class TestCeiling:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [
            SimAccount("capped", max_concurrency=2, toml="[accounts.ceilings]\nfive_hour = 0.5"),
            SimAccount("spare", max_concurrency=2),
        ]

    def test_an_account_at_its_ceiling_is_reserved_and_jobs_go_around_it(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        accounts: list[SimAccount],
        settings: Settings,
        redis_client: redis.Redis,
    ) -> None:
        configure(
            simulator,
            accounts,
            {
                "capped": [{"family": "5h", "length_s": 600, "requests": 4}],
                "spare": [{"family": "5h", "length_s": 600, "requests": 1000}],
            },
        )
        workers()
        workers()
        ids = [client.submit(prompt=f"[[sim: text ok-{i}]] job {i}").id for i in range(8)]
        records = wait_all(client, ids, timeout=180)
        assert [r.status for r in records] == ["succeeded"] * 8, [r.error for r in records]
        served = main_requests(simulator, "capped")
        # Requests the simulator served beyond the ceiling: none (each found five_hour below 0.5 when it came).
        assert served and all(e["utilization_before"]["five_hour"] < 0.5 for e in served), served
        assert all(e["outcome"] != "rejected" for e in served)
        assert sum(r.account == "spare" for r in records) >= 6
        state = store(settings, redis_client).state("capped")
        assert state.state == "reserved", state
        assert [(r.window, r.ceiling) for r in state.reservations if not r.predicted] == [("five_hour", 0.5)]
        shown = CliRunner().invoke(accounts_app, [], env=settings_env(settings))
        assert shown.exit_code == 0, shown.output
        assert "reserved" in shown.output and "five_hour 0.50 at ceiling 0.50, until" in shown.output
        listed = CliRunner().invoke(accounts_app, ["--json"], env=settings_env(settings))
        capped = next(a for a in json.loads(listed.output) if a["name"] == "capped")
        assert capped["state"] == "reserved" and capped["reservations"][0]["window"] == "five_hour"


class TestModelFamilyWindow:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("solo", max_concurrency=2)]

    def test_a_rejection_on_the_opus_weekly_window_holds_back_only_opus_jobs(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
        accounts: list[SimAccount],
    ) -> None:
        configure(
            simulator,
            accounts,
            {
                "solo": [
                    {"family": "5h", "length_s": 600, "requests": 1000},
                    {"family": "7d_opus", "length_s": 600, "requests": 1, "used_requests": 1},
                ]
            },
        )
        workers()
        opus = client.submit(prompt="[[sim: text opus]] an opus job", model=OPUS)
        run_until(lambda: client.get(opus.id).status == "deferred", 90, what="the opus job deferred")
        state = store(settings, redis_client).state("solo")
        assert set(state.family_cooldowns) == {"opus"} and state.state == "ok", state
        sonnet = [client.submit(prompt=f"[[sim: text sonnet-{i}]] s{i}", model=SONNET).id for i in range(3)]
        plain = client.submit(prompt="[[sim: text plain]] the default model").id
        records = wait_all(client, [*sonnet, plain], timeout=120)
        assert [r.status for r in records] == ["succeeded"] * 4, [r.error for r in records]
        assert all(r.account == "solo" for r in records)
        # The opus job still waits, in the account's opus line; only its own request was refused.
        assert client.get(opus.id).status == "deferred"
        line = Keys(settings.key_prefix).account_waiters("solo", "opus")
        assert redis_client.zscore(line, opus.id) is not None
        rejected = [e for e in main_requests(simulator, "solo") if e["outcome"] == "rejected"]
        assert len(rejected) == 1 and "opus" in rejected[0]["model"]
        assert client.cancel(opus.id) == "cancelled"


class TestPredictive:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("busy", max_concurrency=3)]

    def test_admission_stops_before_the_window_is_used_up(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
        accounts: list[SimAccount],
    ) -> None:
        configure(simulator, accounts, {"busy": [{"family": "5h", "length_s": 12, "requests": 4}]})
        workers(concurrency=3, ramp_jitter_s=0)
        workers(concurrency=3, ramp_jitter_s=0)
        ids = [client.submit(prompt=f"[[sim: text p-{i}]] p{i}").id for i in range(7)]
        records = wait_all(client, ids, timeout=180)
        assert [r.status for r in records] == ["succeeded"] * 7, [r.error for r in records]
        served = main_requests(simulator, "busy")
        assert [e for e in served if e["outcome"] == "rejected"] == []
        assert [a.outcome for r in records for a in r.attempts if a.outcome == "rate_limited"] == []


class TestRamp:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("ramped", max_concurrency=4, toml="ramp_starts_per_s = 1.0")]

    def test_waiting_jobs_start_staggered_after_the_reset(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
        accounts: list[SimAccount],
    ) -> None:
        length = 10.0
        window = {"family": "5h", "length_s": length, "requests": 5, "used_requests": 4}
        configure(simulator, accounts, {"ramped": [window]})
        workers(concurrency=3, ramp_jitter_s=0)
        workers(concurrency=3, ramp_jitter_s=0)
        first = client.submit(prompt="[[sim: text first]] uses the window up")
        assert client.wait(first.id, timeout=90, poll_s=0.2).status == "succeeded"
        # The window is used up: the account is reserved until it resets; these jobs wait in line for it.
        assert store(settings, redis_client).state("ramped").state == "reserved"
        ids = [client.submit(prompt=f"[[sim: text r-{i}]] r{i}").id for i in range(4)]
        records = wait_all(client, ids, timeout=120)
        assert [r.status for r in records] == ["succeeded"] * 4, [r.error for r in records]
        served = main_requests(simulator, "ramped")
        assert [e for e in served if e["outcome"] == "rejected"] == []
        reset = served[0]["time"] + length
        starts = sorted(a.started_at.timestamp() for r in records for a in r.attempts if a.outcome == "success")
        assert starts[0] >= reset - 1.0  # nothing ran before the window reset (clocks: the same host)
        # Staggered at the ramp (1 start per second on this account), not all at once: leave half a second for a
        # loaded machine between the slot being taken and the attempt's start being stamped.
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(g >= 0.5 for g in gaps), gaps
