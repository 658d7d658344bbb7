"""Rate-limit headers -> facts (pure), and what the account state does with them (fakeredis)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import fakeredis
import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import JobSpec
from claudeq.script_calls import run_call
from claudeq.worker.accounts.manager import AccountManager, NoAccount, SlotLease
from claudeq.worker.passthrough.limit_headers import parse, parse_reset, parse_retry_after
from tests.support.aio import run

NOW = 1_800_000_000.0
SPEC = JobSpec(prompt="hello")


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def api_key_headers(remaining: int, reset: float, limit: int = 6, **extra: str) -> list[tuple[str, str]]:
    return [
        ("Anthropic-Ratelimit-Requests-Limit", str(limit)),
        ("anthropic-ratelimit-requests-remaining", str(remaining)),
        ("anthropic-ratelimit-requests-reset", iso(reset)),
        *extra.items(),
    ]


def test_api_key_families_with_limit_remaining_reset() -> None:
    headers = [
        *api_key_headers(2, NOW + 20),
        ("anthropic-ratelimit-tokens-limit", "1000"),
        ("anthropic-ratelimit-tokens-remaining", "250"),
        ("anthropic-ratelimit-tokens-reset", iso(NOW + 30)),
        ("anthropic-ratelimit-input-tokens-limit", "800"),
        ("anthropic-ratelimit-input-tokens-remaining", "800"),
        ("anthropic-ratelimit-input-tokens-reset", iso(NOW + 5)),
        ("anthropic-ratelimit-output-tokens-remaining", "0"),
        ("anthropic-ratelimit-output-tokens-reset", iso(NOW + 9)),
    ]
    facts = parse(headers, 200, NOW)
    requests = facts.windows["requests"]
    assert (requests.limit, requests.remaining, requests.utilization) == (6, 2, pytest.approx(4 / 6))
    assert requests.resets_at == datetime.fromtimestamp(NOW + 20, UTC)
    assert facts.windows["tokens"].utilization == pytest.approx(0.75)
    assert facts.windows["input_tokens"].utilization == 0.0
    assert facts.windows["output_tokens"].status == "rejected"  # remaining 0
    assert [name for name, _ in facts.exhausted()] == ["output_tokens"]
    assert facts.until() is None  # not a 429


def test_retry_after_wins_then_unified_reset_then_exhausted_resets() -> None:
    plain = parse([("retry-after", "3")], 429, NOW)
    assert plain.until() == (datetime.fromtimestamp(NOW + 3, UTC), "retry-after 3 s")
    dated = parse([("Retry-After", "Thu, 15 Jan 2027 08:00:05 GMT")], 429, NOW)
    assert dated.retry_after_s is not None and dated.retry_after_s > 0
    unified = parse(
        [
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", str(int(NOW + 120))),
            ("anthropic-ratelimit-unified-5h-status", "rejected"),
            ("anthropic-ratelimit-unified-5h-utilization", "1.0"),
            ("anthropic-ratelimit-unified-5h-reset", str(int(NOW + 120))),
            ("anthropic-ratelimit-unified-7d_opus-utilization", "0.4"),
        ],
        429,
        NOW,
    )
    assert unified.until() == (datetime.fromtimestamp(int(NOW + 120), UTC), "unified reset")
    assert unified.windows["five_hour"].utilization == 1.0
    assert unified.windows["seven_day_opus"].utilization == 0.4
    exhausted = parse(api_key_headers(0, NOW + 7), 429, NOW)
    assert exhausted.until() == (datetime.fromtimestamp(NOW + 7, UTC), "requests reset")
    nothing = parse([("content-type", "application/json")], 429, NOW)
    assert nothing.until() is None and nothing.empty and nothing.rejected


@pytest.mark.parametrize("value", ["", "soon", "-1", "nan", "inf"])
def test_unreadable_retry_after_is_no_hint(value: str) -> None:
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize("value", ["", "x", "0", "nan", "1e20"])
def test_unreadable_reset_is_none(value: str) -> None:
    assert parse_reset(value) is None


# ---- the account state ---------------------------------------------------------------------------------------------


@pytest.fixture
def manager(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> AccountManager:
    pool = AccountPool(
        accounts=[AccountConfig(name=n, kind="api_key", token_env=f"T_{n}", max_concurrency=2) for n in ("a", "b")]
    )
    cfg = fake_settings.model_copy(update={"rate_limit_backoff_s": 2.0, "rate_limit_cooldown_s": 10.0})
    return AccountManager(cfg, fake_redis, Keys(cfg.key_prefix), pool)


def test_a_429_cools_until_retry_after_not_the_fixed_cooldown(manager: AccountManager) -> None:
    now = time.time()
    hint = manager.signals.record_response("a", parse([("retry-after", "3")], 429, now))
    assert hint is not None and not hint.adaptive
    state = manager.signals.state("a")
    assert state.state == "cooling" and state.cooldown_until is not None
    assert state.cooldown_until.timestamp() == pytest.approx(now + 3, abs=0.01)
    assert state.counters["rejected"] == 1


def test_429s_without_a_hint_back_off_2_4_8_capped_and_a_success_starts_again_at_2(manager: AccountManager) -> None:
    waits = []
    for _ in range(4):
        now = time.time()
        hint = manager.signals.record_response("a", parse([], 429, now))
        assert hint is not None and hint.adaptive
        waits.append(round(hint.until.timestamp() - now))
    assert waits == [2, 4, 8, 10]
    manager.signals.record_response("a", parse([], 200, time.time()))
    hint = manager.signals.record_response("a", parse([], 429, time.time() + 60))
    assert hint is not None and "1 in a row" in hint.reason


def test_remaining_spoken_for_by_runs_in_flight_holds_the_account(manager: AccountManager) -> None:
    now = time.time()
    manager.signals.record_response("a", parse(api_key_headers(1, now + 20), 200, now))
    first = run(manager.acquire("j1", SPEC.model_copy(update={"account": "a"})))
    assert isinstance(first, SlotLease)  # 1 left, nothing in flight
    held = run(manager.acquire("j2", SPEC.model_copy(update={"account": "a"})))
    assert isinstance(held, NoAccount) and held.cooldown  # the run in flight may take the last one
    assert "holding back" in held.reason
    state = manager.signals.state("a")
    assert state.held_until is not None and state.held_until.timestamp() == pytest.approx(now + 20, abs=1)
    assert isinstance(run(manager.acquire("j3", SPEC)), SlotLease)  # unpinned: b has no reading, it takes it
    run(manager.release(first))
    assert isinstance(run(manager.acquire("j2", SPEC.model_copy(update={"account": "a"}))), SlotLease)


def test_remaining_0_holds_until_the_reset_then_the_limit_is_what_is_left(manager: AccountManager) -> None:
    now = time.time()
    manager.signals.record_response("a", parse(api_key_headers(0, now + 30, limit=1), 200, now))
    held = run(manager.acquire("j1", SPEC.model_copy(update={"account": "a"})))
    assert isinstance(held, NoAccount)
    assert held.ready_at.timestamp() == pytest.approx(now + 30, abs=0.01)
    # After the reset, a fresh window holds its limit (1): one run may start, a second waits for it.
    later = time.time() + 31
    assert run_call(manager.store.acquire_call("a", "j1", 15, now=later)) == 1
    assert run_call(manager.store.acquire_call("a", "j2", 15, now=later)) == -3


def test_a_stale_reading_of_an_older_window_does_not_overwrite_a_newer_one(manager: AccountManager) -> None:
    now = time.time()
    manager.signals.record_response("a", parse(api_key_headers(4, now + 40), 200, now))
    manager.signals.record_response("a", parse(api_key_headers(0, now + 10), 200, now))  # arrived late, older window
    assert manager.signals.state("a").held_until is None
    # the same window, larger: older too
    manager.signals.record_response("a", parse(api_key_headers(5, now + 40), 200, now))
    raw = manager.store.redis.hget(manager.store.keys.account("a"), "rq_rem")
    assert raw == b"4"
