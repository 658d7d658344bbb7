"""End to end: the pass-through learns where a prompt prefix is warm, and the next job of the same family goes to
that account and reads its prefix from the cache. Real workers, the real CLI, the simulator's per-account prompt
cache (docs/architecture.md#cache-affinity)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobRecord
from claudeq.producer.cli_accounts import accounts_app
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount

pytestmark = pytest.mark.e2e

APPEND = "You review pull requests for the billing team.\n" + "b" * 30_000


def run_started(client: Client, record: JobRecord) -> dict[str, Any]:
    [event] = [e for e in client.events(record.id) if e.type == "run_started"]
    return event.data


def main_usage(simulator: Any, record: JobRecord) -> dict[str, int]:
    session = record.attempts[-1].session_id
    [entry] = [r for r in simulator.requests() if r["session_id"] == session and r["kind"] == "main"]
    usage: dict[str, int] = entry["usage"]
    return usage


def run(client: Client, prompt: str, **spec: Any) -> JobRecord:
    record = client.submit(prompt=prompt, append_system_prompt=APPEND, **spec).wait(timeout=120)
    assert record.status == "succeeded", record.error
    return record


def test_the_next_job_of_a_family_goes_to_the_account_whose_cache_is_warm(
    client: Client,
    workers: WorkerFactory,
    simulator: Any,
    settings: Settings,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    workers(concurrency=1)
    first = run(client, '[[sim: text "one"]] review #1', account="b")  # warms b (a comes first in the pool)
    assert first.account == "b"
    # The pass-through filed the prefixes it saw cached on b: digests with the TTL the CLI asked for, no content.
    now = time.time()
    filed = redis_client.zrange(Keys(settings.key_prefix).account_prefixes("b"), 0, -1, withscores=True)
    assert filed and all(re.fullmatch(rb"[0-9a-f]{32}", digest) for digest, _ in filed)
    assert all(now + 3000 < expiry <= now + 3600 for _, expiry in filed)
    assert not redis_client.exists(Keys(settings.key_prefix).account_prefixes("a"))

    second = run(client, '[[sim: text "two"]] review #2')
    assert second.account == "b"
    assert run_started(client, second)["reason"] == "warm cache"
    assert main_usage(simulator, second)["cache_read"] > len(APPEND) // 4

    other = client.submit(prompt='[[sim: text "three"]] another family').wait(timeout=120)
    assert other.status == "succeeded", other.error
    assert (other.account, run_started(client, other)["reason"]) == ("a", "least used")

    # `claudeq accounts` shows the share of each account's input-side tokens read from the cache.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLAUDEQ_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CLAUDEQ_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CLAUDEQ_ACCOUNTS_FILE", str(settings.accounts_file))
    shown = {row["name"]: row for row in json.loads(CliRunner().invoke(accounts_app, ["--json"]).output)}
    assert shown["a"]["cache_hit_ratio"] == 0.0  # one job, its prefix written
    assert 0.3 < shown["b"]["cache_hit_ratio"] < 0.6  # written once, read once
    table = CliRunner().invoke(accounts_app, []).output
    assert "cache hit" in table and f"{shown['b']['cache_hit_ratio']:.0%}" in table


def test_without_affinity_the_least_used_account_is_chosen_and_pays_the_prefix_again(
    client: Client, workers: WorkerFactory, simulator: Any
) -> None:
    workers(concurrency=1, cache_affinity=False)
    run(client, '[[sim: text "one"]] review #1', account="b")
    second = run(client, '[[sim: text "two"]] review #2')
    assert second.account == "a"
    assert run_started(client, second)["reason"] == "least used"
    assert main_usage(simulator, second)["cache_read"] == 0


class TestWaitingForTheWarmAccount:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("a", max_concurrency=2), SimAccount("b", max_concurrency=1)]

    def test_a_job_waits_for_the_warm_accounts_slot_within_the_setting(
        self, client: Client, workers: WorkerFactory, simulator: Any
    ) -> None:
        workers(concurrency=3, cache_affinity_wait_s=60)
        run(client, '[[sim: text "one"]] review #1', account="b")  # warms b
        busy = client.submit(
            prompt='[[sim: delay 6]] [[sim: text "slow"]] review #2', append_system_prompt=APPEND, account="b"
        )
        run_until(lambda: client.get(busy.id).status == "running", 30, 0.1, what="b's slot taken")
        third = run(client, '[[sim: text "three"]] review #3')
        assert third.account == "b"  # waited for b's slot although a was free
        assert run_started(client, third)["reason"] == "warm cache"
        assert client.get(busy.id).finished_at is not None
        assert third.attempts[0].started_at >= client.get(busy.id).finished_at  # type: ignore[operator]
        assert (third.attempts[0].started_at - third.created_at).total_seconds() < 60
        assert main_usage(simulator, third)["cache_read"] > len(APPEND) // 4

    def test_a_job_never_waits_past_the_setting(self, client: Client, workers: WorkerFactory) -> None:
        workers(concurrency=3, cache_affinity_wait_s=1)
        run(client, '[[sim: text "one"]] review #1', account="b")
        busy = client.submit(
            prompt='[[sim: delay 8]] [[sim: text "slow"]] review #2', append_system_prompt=APPEND, account="b"
        )
        run_until(lambda: client.get(busy.id).status == "running", 30, 0.1, what="b's slot taken")
        third = run(client, '[[sim: text "three"]] review #3')
        assert third.account == "a"
        assert (third.attempts[0].started_at - third.created_at).total_seconds() < 6
