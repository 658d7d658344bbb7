"""Rate-limit windows and the headers the CLI reads (docs/cli-behaviour.md), tested on plain values."""

from __future__ import annotations

import pytest

from claudeq.simulator.accounts import UNIFIED, Account, AccountRegistry, Window
from claudeq.simulator.config import AccountKind, SimConfig, WindowConfig

NOW = 1_800_000_000.0


def account(*windows: WindowConfig, kind: AccountKind = "oauth") -> Account:
    return Account(name="a", kind=kind, windows=[Window.from_config(w) for w in windows])


def test_requests_beyond_the_limit_are_rejected_with_the_window_reset() -> None:
    acct = account(WindowConfig(family="5h", length_s=60, requests=2))
    assert acct.admit(NOW) is None
    assert acct.admit(NOW + 1) is None
    blocking = acct.admit(NOW + 2)
    assert blocking is not None
    err = acct.rejection(blocking, NOW + 2)
    assert err.status == 429
    assert err.error_type == "rate_limit_error"
    assert err.headers[f"{UNIFIED}-status"] == "rejected"
    assert err.headers[f"{UNIFIED}-reset"] == str(int(NOW + 60))
    assert err.headers[f"{UNIFIED}-representative-claim"] == "five_hour"
    assert err.headers[f"{UNIFIED}-5h-status"] == "rejected"
    # The CLI gives up at once on this 429 (docs/cli-behaviour.md#api-errors-and-cli-retries); a retry-after would
    # invite retries.
    assert "retry-after" not in err.headers


def test_window_starts_afresh_after_its_reset() -> None:
    acct = account(WindowConfig(length_s=60, requests=1))
    assert acct.admit(NOW) is None
    assert acct.admit(NOW + 59) is not None
    assert acct.admit(NOW + 60) is None
    assert acct.windows[0].reset_at(NOW + 60) == int(NOW + 120)


def test_token_limit_rejects_once_used_up() -> None:
    acct = account(WindowConfig(length_s=600, tokens=100))
    assert acct.admit(NOW) is None
    acct.add_tokens(100)
    assert acct.admit(NOW + 1) is not None


def test_below_threshold_headers_carry_utilization_without_warning() -> None:
    acct = account(WindowConfig(family="7d", length_s=100, requests=10, warn_at=0.8))
    acct.admit(NOW)
    headers = acct.allowed_headers(NOW)
    assert headers[f"{UNIFIED}-status"] == "allowed"
    assert headers[f"{UNIFIED}-7d-utilization"] == "0.1"
    assert headers[f"{UNIFIED}-7d-status"] == "allowed"
    assert headers[f"{UNIFIED}-representative-claim"] == "seven_day"
    assert f"{UNIFIED}-7d-surpassed-threshold" not in headers


def test_past_threshold_headers_warn_with_surpassed_threshold() -> None:
    acct = account(WindowConfig(family="5h", length_s=100, requests=10, warn_at=0.8, used_requests=8))
    acct.admit(NOW)
    headers = acct.allowed_headers(NOW)
    # The top-level status stays "allowed": the CLI maps allowed_warning there to allowed anyway.
    assert headers[f"{UNIFIED}-status"] == "allowed"
    assert headers[f"{UNIFIED}-5h-status"] == "allowed_warning"
    assert headers[f"{UNIFIED}-5h-utilization"] == "0.9"
    assert headers[f"{UNIFIED}-5h-surpassed-threshold"] == "0.8"
    assert headers[f"{UNIFIED}-5h-reset"] == str(int(NOW + 100))


def test_representative_claim_is_the_most_used_window() -> None:
    acct = account(
        WindowConfig(family="5h", length_s=100, requests=100),
        WindowConfig(family="7d_oi", length_s=1000, requests=4),
    )
    acct.admit(NOW)
    headers = acct.allowed_headers(NOW)
    assert headers[f"{UNIFIED}-representative-claim"] == "seven_day_overage_included"
    assert headers[f"{UNIFIED}-reset"] == str(int(NOW + 1000))


def test_blocked_until_the_last_exhausted_window_resets() -> None:
    acct = account(
        WindowConfig(family="5h", length_s=100, requests=0),
        WindowConfig(family="7d", length_s=5000, requests=0),
    )
    blocking = acct.admit(NOW)
    assert blocking is not None
    assert blocking.config.family == "7d"


def test_api_key_rejection_is_a_plain_429_with_retry_after() -> None:
    acct = account(WindowConfig(length_s=30, requests=1), kind="api_key")
    acct.admit(NOW)
    blocking = acct.admit(NOW + 10)
    assert blocking is not None
    err = acct.rejection(blocking, NOW + 10)
    assert err.headers["retry-after"] == "20"
    assert err.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert not any(h.startswith(UNIFIED) for h in err.headers)


def test_api_key_answers_carry_no_unified_headers() -> None:
    acct = account(WindowConfig(length_s=30, requests=5, tokens=1000), kind="api_key")
    acct.admit(NOW)
    headers = acct.allowed_headers(NOW)
    assert headers["anthropic-ratelimit-requests-remaining"] == "4"
    assert headers["anthropic-ratelimit-tokens-limit"] == "1000"
    assert not any(h.startswith(UNIFIED) for h in headers)


def test_open_registry_gives_each_token_its_own_account() -> None:
    registry = AccountRegistry(SimConfig())
    a = registry.lookup("token-a", "oauth")
    b = registry.lookup("token-b", "oauth")
    assert a is not None and b is not None and a is not b
    assert registry.lookup("token-a", "oauth") is a
    assert "token-a" not in a.name


def test_configured_registry_refuses_unknown_tokens_and_keeps_usage_on_reconfigure() -> None:
    window = {"family": "5h", "length_s": 100, "requests": 3}
    config = SimConfig.model_validate({"accounts": [{"name": "x", "token": "tok-x", "windows": [window]}]})
    registry = AccountRegistry(config)
    assert registry.lookup("other", "oauth") is None
    acct = registry.lookup("tok-x", "oauth")
    assert acct is not None
    acct.admit(NOW)
    changed = SimConfig.model_validate(
        {"accounts": [{"name": "x", "token": "tok-x", "windows": [{**window, "requests": 10}]}]}
    )
    again = AccountRegistry(changed, previous=registry).lookup("tok-x", "oauth")
    assert again is not None
    assert again.windows[0].requests == 1
    assert again.windows[0].config.requests == 10


def test_config_refuses_two_windows_of_one_family() -> None:
    with pytest.raises(ValueError, match="one window per family"):
        SimConfig.model_validate(
            {"accounts": [{"name": "x", "token": "t", "windows": [{"family": "5h"}, {"family": "5h"}]}]}
        )


def test_a_model_family_window_counts_and_refuses_only_that_family() -> None:
    acct = account(
        WindowConfig(family="5h", length_s=60, requests=10), WindowConfig(family="7d_opus", length_s=600, requests=1)
    )
    assert acct.utilization_before(NOW, "claude-opus-4-1") == {"five_hour": 0.0, "seven_day_opus": 0.0}
    assert acct.admit(NOW, "claude-opus-4-1") is None
    blocking = acct.admit(NOW + 1, "claude-opus-4-1")
    assert blocking is not None
    err = acct.rejection(blocking, NOW + 1)
    assert err.headers[f"{UNIFIED}-representative-claim"] == "seven_day_opus"
    assert err.headers[f"{UNIFIED}-7d_opus-status"] == "rejected"
    assert err.headers[f"{UNIFIED}-reset"] == str(int(NOW + 600))
    # Sonnet (and the default model) keep going, and never count against the opus window.
    assert acct.admit(NOW + 2, "claude-sonnet-4-5") is None
    assert acct.admit(NOW + 3, None) is None
    assert acct.utilization_before(NOW + 4, "sonnet") == {"five_hour": 0.3}
    # Every answer reports the family window's utilization.
    assert acct.allowed_headers(NOW + 4)[f"{UNIFIED}-7d_opus-utilization"] == "1.0"
