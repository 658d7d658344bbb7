"""`claudeq accounts` on fakeredis (the store is injected through the click context object)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest
from typer.testing import CliRunner

from claudeq.accounts import AccountStore
from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.keys import Keys
from claudeq.models import WindowInfo
from claudeq.producer.cli_accounts import EXIT_BAD_INPUT, accounts_app
from claudeq.script_calls import run_call

runner = CliRunner()


@pytest.fixture
def store(fake_redis: fakeredis.FakeRedis) -> AccountStore:
    pool = AccountPool(
        accounts=[
            AccountConfig(name="alpha", kind="oauth", token_env="TOKEN_ALPHA", max_concurrency=2),
            AccountConfig(name="beta", kind="api_key", token_env="TOKEN_BETA"),
        ]
    )
    return AccountStore(fake_redis, Keys("t:"), pool)


def invoke(store: AccountStore, *args: str) -> tuple[int, str]:
    result = runner.invoke(accounts_app, list(args), obj=store)
    return result.exit_code, result.output


def test_json_lists_every_account_with_state_slots_and_utilization(store: AccountStore) -> None:
    run_call(store.acquire_call("alpha", "j1", 30))
    store.record_window(
        "alpha",
        "five_hour",
        WindowInfo(status="allowed_warning", utilization=0.91, resets_at=datetime.now(UTC) + timedelta(hours=1)),
    )
    store.set_warning("alpha", "five_hour")
    store.cool("beta", datetime.now(UTC) + timedelta(seconds=90), "rate limited on five_hour")
    code, output = invoke(store, "--json")
    assert code == 0, output
    rows = {row["name"]: row for row in json.loads(output)}
    assert rows["alpha"]["state"] == "warning"
    assert rows["alpha"]["slots_in_use"] == 1
    assert rows["alpha"]["max_concurrency"] == 2
    assert rows["alpha"]["utilization"] == {"five_hour": 0.91}
    assert rows["beta"]["state"] == "cooling"
    assert rows["beta"]["reason"] == "rate limited on five_hour"
    assert rows["beta"]["cooldown_until"].endswith("Z")
    assert "TOKEN" not in output


def test_table_and_json_show_what_is_left_of_requests_and_tokens_and_the_resets(store: AccountStore) -> None:
    reset = datetime.now(UTC) + timedelta(seconds=30)
    store.record_limits(
        "beta",
        {
            "requests": WindowInfo(status="allowed", limit=6, remaining=0, resets_at=reset, utilization=1.0),
            "tokens": WindowInfo(status="allowed", limit=10000, remaining=2500, resets_at=reset, utilization=0.75),
        },
        requests=(0, reset.timestamp(), 6),
        tokens=(2500, reset.timestamp(), 10000),
        tokens_per_request=None,
        success=True,
    )
    code, output = invoke(store)
    assert code == 0, output
    assert "0/6, reset in" in output and "2500/10000" in output
    assert "holding back" in output
    code, output = invoke(store, "--json")
    row = {r["name"]: r for r in json.loads(output)}["beta"]
    assert row["windows"]["requests"]["remaining"] == 0 and row["windows"]["tokens"]["limit"] == 10000
    assert row["held_until"].endswith("Z")


def test_table_shows_state_reason_slots_and_relative_cooldown(store: AccountStore) -> None:
    store.cool("beta", datetime.now(UTC) + timedelta(seconds=90), "rate limited")
    code, output = invoke(store)
    assert code == 0, output
    assert "alpha" in output
    assert "0/2" in output
    assert "cooling" in output
    assert "rate limited" in output
    assert "in 9" in output  # "in 90s" or "in 89s"
    code, listed = invoke(store, "list")
    assert code == 0
    assert "alpha" in listed


def test_disable_enable_and_clear_cooldown(store: AccountStore) -> None:
    code, output = invoke(store, "disable", "alpha", "--reason", "token rotated")
    assert code == 0, output
    assert store.state("alpha").state == "disabled"
    assert store.state("alpha").reason == "token rotated"
    code, output = invoke(store, "--json")
    assert json.loads(output)[0]["reason"] == "token rotated"
    code, output = invoke(store, "enable", "alpha", "--json")
    assert code == 0
    assert json.loads(output)["state"] == "ok"
    store.cool("beta", datetime.now(UTC) + timedelta(seconds=90), "rate limited")
    code, output = invoke(store, "clear-cooldown", "beta")
    assert code == 0
    assert "now ok" in output
    assert store.state("beta").state == "ok"


@pytest.mark.parametrize("command", ["enable", "disable", "clear-cooldown"])
def test_unknown_account_exits_2_with_a_clear_message(store: AccountStore, command: str) -> None:
    code, output = invoke(store, command, "nope")
    assert code == EXIT_BAD_INPUT
    assert "no account named 'nope'" in output
    code, output = invoke(store, command, "nope", "--json")
    assert code == EXIT_BAD_INPUT
    assert json.loads(output) == {"error": "no account named 'nope' (see `claudeq accounts`)"}


def test_no_accounts_configured(fake_redis: fakeredis.FakeRedis) -> None:
    empty = AccountStore(fake_redis, Keys("t:"), AccountPool())
    code, output = invoke(empty)
    assert code == 0
    assert "no accounts configured" in output
    code, output = invoke(empty, "--json")
    assert json.loads(output) == []


def test_redis_down_exits_1(store: AccountStore) -> None:
    server = fakeredis.FakeServer()
    server.connected = False
    down = AccountStore(fakeredis.FakeRedis(server=server), Keys("t:"), store.pool)
    code, output = invoke(down, "--json")
    assert code == 1
    assert "Redis" in json.loads(output)["error"]


def test_the_prompt_cache_hit_ratio_is_shown_once_an_account_has_tokens(store: AccountStore) -> None:
    code, output = invoke(store)
    assert code == 0 and "cache hit" not in output
    store.incr("alpha", "cache_read_tokens", 9_000)
    store.incr("alpha", "cache_write_tokens", 600)
    store.incr("alpha", "input_tokens", 400)
    code, output = invoke(store)
    assert code == 0 and "cache hit" in output and "90%" in output and "9,000" in output
    code, output = invoke(store, "--json")
    shown = {row["name"]: row["cache_hit_ratio"] for row in json.loads(output)}
    assert shown == {"alpha": 0.9, "beta": None}
