"""End to end: the worker's pass-through reads the rate-limit headers of every response; real workers,
the real CLI and the simulator.

API-key accounts get no RateLimitEvent from the CLI, only a plain 429: what the API says in `retry-after` and in
the `anthropic-ratelimit-*` headers is all there is to go by. And each run's CLI holds a stand-in credential, never
the account's token.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import redis

from claudeq.accounts import AccountStore
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.keys import Keys
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.e2e.test_accounts import configure, sim_account
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount

pytestmark = pytest.mark.e2e


def store_of(settings: Settings, redis_client: redis.Redis) -> AccountStore:
    return AccountStore(redis_client, Keys(settings.key_prefix), settings.accounts)


def succeeded(client: Client, job_id: str, timeout: float = 90) -> JobRecord:
    record = client.wait(job_id, timeout=timeout, poll_s=0.1)
    assert record.status == "succeeded", (record.error, [(a.outcome, a.detail) for a in record.attempts])
    return record


class TestApiKey429:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("k", kind="api_key", max_concurrency=1)]

    def test_retry_after_3_cools_the_account_3_s_and_the_job_then_succeeds_on_it(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
        unique: str,
    ) -> None:
        workers()  # rate_limit_cooldown_s stays 60 s: the old fixed cooldown would hold the job a minute
        job = client.submit(prompt=f"[[sim: error 429 retry_after=3 times=1]] [[sim: text done]] {unique}")
        record = succeeded(client, job.id)
        first, second = record.attempts
        assert (first.account, first.outcome) == ("k", "rate_limited")
        assert (second.account, second.outcome) == ("k", "success")
        assert "retry-after 3 s" in (first.detail or "")
        cooled_until = store_of(settings, redis_client).state("k")
        raw = redis_client.hget(Keys(settings.key_prefix).account("k"), "cooldown_until")
        assert raw is not None
        assert first.finished_at is not None and second.started_at is not None
        # Cooled about the 3 s the API asked for: from the 429 (before the attempt ended) to 3 s later, not 60 s.
        until = float(raw)
        assert first.started_at.timestamp() + 3 <= until <= first.finished_at.timestamp() + 3
        assert second.started_at.timestamp() >= until - 0.05
        assert cooled_until.state == "ok"  # over by now
        assert sim_account(simulator, "k")["requests"] == 2

    def test_a_429_without_a_hint_backs_off_short_then_longer_and_a_success_starts_it_short_again(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        settings: Settings,
        redis_client: redis.Redis,
        unique: str,
    ) -> None:
        # No ramp jitter after a cooldown (up to 1 s by default, on top of the wait's own 0.5 s): with it the two
        # waits overlap, about 1-2.5 s and 2-3.5 s, and their order was chance (a CI run saw 2.09 s then 1.98 s).
        workers(rate_limit_backoff_s=1.0, ramp_jitter_s=0)
        job = client.submit(prompt=f"[[sim: error 429 retry_after=none times=2]] [[sim: text done]] {unique}")
        record = succeeded(client, job.id)
        outcomes = [(a.outcome, a.detail or "") for a in record.attempts]
        assert [o for o, _ in outcomes] == ["rate_limited", "rate_limited", "success"], outcomes
        assert "backoff 1 s (1 in a row)" in outcomes[0][1]
        assert "backoff 2 s (2 in a row)" in outcomes[1][1]
        gaps = [
            (later.started_at - earlier.finished_at).total_seconds()
            for earlier, later in zip(record.attempts, record.attempts[1:], strict=False)
            if earlier.finished_at is not None
        ]
        assert gaps[1] > gaps[0], gaps  # the second wait is the longer one
        key = Keys(settings.key_prefix).account("k")
        assert redis_client.hget(key, "bo_n") is None  # the success ended the streak

        again = client.submit(prompt=f"[[sim: error 429 retry_after=none times=1]] [[sim: text done]] {unique} 2")
        record = succeeded(client, again.id)
        assert "backoff 1 s (1 in a row)" in (record.attempts[0].detail or "")


class TestRemainingZero:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("k", kind="api_key", max_concurrency=2)]

    def test_remaining_0_holds_new_jobs_until_the_reset_without_a_single_rejected_request(
        self,
        client: Client,
        workers: WorkerFactory,
        simulator: Any,
        accounts: list[SimAccount],
        settings: Settings,
        redis_client: redis.Redis,
        unique: str,
    ) -> None:
        # One request per 5 s window: the first job's reply says `remaining: 0` with the reset ~5 s away.
        configure(simulator, accounts, k={"windows": [{"family": "5h", "length_s": 5, "requests": 1}]})
        workers()
        first = succeeded(client, client.submit(prompt=f"[[sim: text one]] first {unique}").id)
        state = store_of(settings, redis_client).state("k")
        window = state.windows["requests"]
        assert (window.limit, window.remaining) == (1, 0)
        assert window.resets_at is not None and first.finished_at is not None
        assert window.resets_at > first.finished_at

        later = [client.submit(prompt=f"[[sim: text more]] later {i} {unique}").id for i in range(3)]
        run_until(
            lambda: (
                store_of(settings, redis_client).state("k").held_until is not None
                or all(client.get(j).status == "succeeded" for j in later)
            ),
            30,
            0.05,
            what="the account holding back",
        )
        records = [succeeded(client, job_id, timeout=120) for job_id in later]
        stats = sim_account(simulator, "k")
        assert stats["rejected"] == 0, stats
        assert stats["requests"] == 4
        # Each job started in a window of its own: one request per window, none refused.
        starts = sorted(a.started_at for r in records for a in r.attempts)
        assert starts[0] >= window.resets_at - timedelta(seconds=1)
        assert all(a.outcome == "success" for r in records for a in r.attempts)


class TestNoRealTokenInReach:
    @pytest.fixture
    def accounts(self) -> list[SimAccount]:
        return [SimAccount("k", kind="api_key", max_concurrency=1), SimAccount("o", kind="oauth")]

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"policy": WorkerPolicy(allowed_tools=["Bash"])})

    def test_a_shell_job_dumping_its_environment_and_the_files_it_can_read_finds_no_real_token(
        self,
        client: Client,
        workers: WorkerFactory,
        accounts: list[SimAccount],
        settings: Settings,
        unique: str,
    ) -> None:
        workers()
        # The tokens are written split so the prompt itself (stored in Redis) never holds one. The command prints
        # counts, never the matches: what it reads is in its own environment, the environment of every process of
        # its run (the CLI included), and every file under its run, config and working directories.
        needles = " ".join(f"-e '{a.token_value[:12]}''{a.token_value[12:]}'" for a in accounts)
        script = (
            "{ env; cat /proc/self/environ; "
            'for p in $(grep -l -a -s "CLAUDEQ_RUN_ID=$CLAUDEQ_RUN_ID" /proc/[0-9]*/environ); do cat $p; done; '
            'grep -r -a -s -h . "$CLAUDE_CONFIG_DIR" "$(dirname "$CLAUDE_CONFIG_DIR")" "$PWD"; } '
            f"| tr '\\0' '\\n' > /tmp/cq-dump-{unique}; "
            f"echo real=$(grep -c -a {needles} /tmp/cq-dump-{unique}) "
            f"standin=$(grep -c -a -e '^ANTHROPIC_API_KEY=sk-ant-api03-' /tmp/cq-dump-{unique}) "
            f"lines=$(wc -l < /tmp/cq-dump-{unique}); rm -f /tmp/cq-dump-{unique}"
        )
        command = json.dumps({"command": script, "description": "dump"})
        job = client.submit(prompt=f"[[sim: tool Bash {command}]] {unique}", tools=["Bash"], account="k")
        record = succeeded(client, job.id)
        text = record.result.text or ""
        assert "real=0 " in text, text
        standin = int(text.split("standin=", 1)[1].split()[0])
        lines = int(text.split("lines=", 1)[1].split()[0])
        assert standin >= 2, text  # it did read the environments: there is the run's own stand-in
        assert lines > 50, text
