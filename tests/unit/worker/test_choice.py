"""The pure account choice: eligibility, order and what to wait for, with plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from claudeq.config.account_pool import AccountConfig
from claudeq.models import AccountState, WindowInfo
from claudeq.worker.accounts.choice import AccountView, JobNeeds, NoAccount, choose, eligible, utilization

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def view(
    name: str,
    *,
    state: str = "ok",
    cooldown_s: float | None = None,
    used: int = 0,
    max_concurrency: int = 1,
    util: float | None = None,
    weight: float = 1.0,
    models: list[str] | None = None,
    slot_free_in_s: float | None = None,
) -> AccountView:
    config = AccountConfig(
        name=name,
        kind="oauth",
        token_env=f"TOKEN_{name}",
        max_concurrency=max_concurrency,
        weight=weight,
        models=models or [],
    )
    windows = {"five_hour": WindowInfo(status="allowed", utilization=util)} if util is not None else {}
    account_state = AccountState(
        name=name,
        state=state,
        cooldown_until=NOW + timedelta(seconds=cooldown_s) if cooldown_s is not None else None,
        windows=windows,
        slots_in_use=used,
        max_concurrency=max_concurrency,
    )
    free_at = NOW + timedelta(seconds=slot_free_in_s) if slot_free_in_s is not None else None
    return AccountView(config, account_state, free_at)


def names(result: list[AccountConfig] | NoAccount) -> list[str]:
    assert isinstance(result, list), result
    return [a.name for a in result]


def test_lowest_utilization_first_and_warned_accounts_last() -> None:
    accounts = [
        view("busy", util=0.8),
        view("warned", state="warning", util=0.1),
        view("idle", util=0.2),
        view("fresh"),
    ]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["fresh", "idle", "busy", "warned"]


def test_weight_divides_utilization() -> None:
    accounts = [view("small", util=0.3, weight=1), view("big", util=0.5, weight=4)]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["big", "small"]


def test_ties_are_broken_by_load_then_pool_order() -> None:
    accounts = [view("a", used=1, max_concurrency=2), view("b", max_concurrency=2), view("c", max_concurrency=2)]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["b", "c", "a"]


def test_utilization_of_a_reset_window_counts_as_zero() -> None:
    state = AccountState(
        name="a",
        windows={
            "five_hour": WindowInfo(status="allowed", utilization=0.9, resets_at=NOW - timedelta(seconds=1)),
            "seven_day": WindowInfo(status="allowed", utilization=0.3, resets_at=NOW + timedelta(days=1)),
        },
    )
    assert utilization(state, NOW) == 0.3


def test_expired_cooldown_is_not_cooling() -> None:
    accounts = [view("a", state="cooling", cooldown_s=-1)]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["a"]


def test_all_cooling_waits_for_the_earliest_cooldown_end() -> None:
    accounts = [view("a", cooldown_s=30), view("b", cooldown_s=10), view("c", state="disabled")]
    result = choose(accounts, JobNeeds(), now=NOW)
    assert isinstance(result, NoAccount)
    assert not result.permanent
    assert result.ready_at == NOW + timedelta(seconds=10)
    assert result.accounts == ["b", "a"]
    assert result.cooldown  # the wait ends with a cooldown: a short one may be waited out in place


def test_full_accounts_wait_for_the_earliest_slot_expiry() -> None:
    accounts = [view("a", used=1, slot_free_in_s=12), view("b", cooldown_s=20)]
    result = choose(accounts, JobNeeds(), now=NOW)
    assert isinstance(result, NoAccount)
    assert result.ready_at == NOW + timedelta(seconds=12)
    assert result.accounts == ["a", "b"]
    assert not result.cooldown  # a slot frees: the job waits deferred for the release, not in place


def test_pin_is_honoured_even_when_another_account_is_free() -> None:
    accounts = [view("a"), view("b", used=1, slot_free_in_s=5)]
    assert names(choose(accounts, JobNeeds(pin="a"), now=NOW)) == ["a"]
    result = choose(accounts, JobNeeds(pin="b"), now=NOW)
    assert isinstance(result, NoAccount)
    assert result.accounts == ["b"]
    assert not result.permanent


def test_model_restrictions() -> None:
    accounts = [view("a", models=["opus"]), view("b", models=["haiku"])]
    assert names(choose(accounts, JobNeeds(model="haiku"), now=NOW)) == ["b"]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["a", "b"]


def test_an_accounts_models_hold_for_the_fallback_model_too() -> None:
    """The CLI switches to `fallback_model` by itself: an account allowing only haiku never runs a job that may
    fall back to opus, and says so (a permanent answer, so the job fails rather than waits)."""
    accounts = [view("a", models=["haiku"]), view("b", models=["haiku", "opus"])]
    assert names(choose(accounts, JobNeeds(model="haiku", fallback_model="opus"), now=NOW)) == ["b"]
    assert eligible(accounts, JobNeeds(model="haiku", fallback_model="opus")) == ["b"]
    refused = choose(accounts[:1], JobNeeds(model="haiku", fallback_model="opus"), now=NOW)
    assert isinstance(refused, NoAccount) and refused.permanent and "fallback_model 'opus'" in refused.reason


def test_exclude_skips_an_account_but_it_may_be_waited_for() -> None:
    accounts = [view("a"), view("b")]
    assert names(choose(accounts, JobNeeds(), now=NOW, exclude={"a"})) == ["b"]
    result = choose(accounts, JobNeeds(), now=NOW, exclude={"a", "b"})
    assert isinstance(result, NoAccount)
    assert not result.permanent
    assert result.ready_at == NOW


def test_permanent_when_nothing_can_ever_run_it() -> None:
    cases = [
        ([], None, None, "no accounts are configured"),
        ([view("a")], "zz", None, "not configured"),
        ([view("a", state="disabled")], "a", None, "disabled"),
        ([view("a", models=["opus"])], None, "haiku", "allows model"),
        ([view("a", state="disabled"), view("b", state="disabled")], None, None, "disabled"),
    ]
    for accounts, pin, model, text in cases:
        result = choose(accounts, JobNeeds(model=model, pin=pin), now=NOW)
        assert isinstance(result, NoAccount)
        assert result.permanent, text
        assert text in result.reason


accounts_strategy: st.SearchStrategy[list[dict[str, object]]] = st.lists(
    st.builds(
        dict,
        state=st.sampled_from(["ok", "warning", "cooling", "disabled"]),
        cooldown_s=st.one_of(st.none(), st.floats(-100, 100)),
        used=st.integers(0, 3),
        max_concurrency=st.integers(1, 3),
        util=st.one_of(st.none(), st.floats(0, 1)),
        weight=st.floats(0.1, 10),
        slot_free_in_s=st.one_of(st.none(), st.floats(0, 60)),
    ),
    max_size=6,
)


@settings(deadline=None, max_examples=300)
@given(
    specs=accounts_strategy,
    exclude=st.sets(st.sampled_from(["a0", "a1", "a2", "a3"])),
    pin=st.one_of(st.none(), st.sampled_from(["a0", "a1", "a9"])),
)
def test_never_chooses_a_cooling_disabled_full_or_excluded_account(
    specs: list[dict[str, object]], exclude: set[str], pin: str | None
) -> None:
    accounts = [view(f"a{i}", **spec) for i, spec in enumerate(specs)]  # type: ignore[arg-type]
    result = choose(accounts, JobNeeds(pin=pin), now=NOW, exclude=exclude)
    by_name = {a.name: a for a in accounts}
    if isinstance(result, NoAccount):
        assert result.ready_at >= NOW
        for name in result.accounts:
            assert not by_name[name].disabled()
            if pin is not None:
                assert name == pin
        if not result.permanent:
            assert result.accounts
        # It only waits when nothing is eligible now.
        eligible = [
            a
            for a in accounts
            if not a.disabled()
            and a.cooling_until(NOW) is None
            and not a.full()
            and a.name not in exclude
            and (pin is None or a.name == pin)
        ]
        assert not eligible
        return
    assert result, "a list result is never empty"
    for account in result:
        chosen = by_name[account.name]
        assert not chosen.disabled()
        assert chosen.cooling_until(NOW) is None
        assert not chosen.full()
        assert account.name not in exclude
        if pin is not None:
            assert account.name == pin
    # Warned accounts come after every other eligible account.
    warned = [by_name[a.name].state.state == "warning" for a in result]
    assert warned == sorted(warned)
