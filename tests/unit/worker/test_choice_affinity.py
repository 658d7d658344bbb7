"""Cache affinity in the pure account choice: a warm account is preferred within the skew bound, never one the
rules exclude (docs/architecture.md#cache-affinity)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from claudeq.worker.accounts.choice import (
    LEAST_USED,
    WARM_CACHE,
    CachePreference,
    JobNeeds,
    NoAccount,
    choose,
    reason_for,
    utilization,
)
from tests.unit.worker.test_choice import NOW, names, view


def test_a_warm_account_within_the_skew_goes_first() -> None:
    accounts = [view("a", util=0.1), view("b", util=0.25), view("c", util=0.2)]
    assert names(choose(accounts, JobNeeds(), now=NOW)) == ["a", "c", "b"]
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference({"b"}, 0.2))) == ["b", "a", "c"]
    assert reason_for("b", {"b"}) == WARM_CACHE and reason_for("a", {"b"}) == LEAST_USED


def test_a_warm_account_past_the_skew_is_not_preferred() -> None:
    accounts = [view("a", util=0.1), view("b", util=0.5)]
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference({"b"}, 0.2))) == ["a", "b"]


def test_a_full_cooling_or_excluded_warm_account_is_never_chosen() -> None:
    accounts = [view("a"), view("full", used=1), view("cool", cooldown_s=60), view("gone")]
    warm = {"full", "cool", "gone"}
    result = choose(accounts, JobNeeds(), now=NOW, exclude={"gone"}, cache=CachePreference(warm, 1.0))
    assert names(result) == ["a"]


def test_a_warned_warm_account_does_not_pass_a_healthy_one() -> None:
    accounts = [view("a", util=0.1), view("w", state="warning", util=0.1)]
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference({"w"}, 1.0))) == ["a", "w"]


ACCOUNT = st.fixed_dictionaries(
    {
        "util": st.one_of(st.none(), st.floats(0, 1)),
        "used": st.integers(0, 2),
        "cooldown_s": st.one_of(st.none(), st.floats(-10, 60)),
        "state": st.sampled_from(["ok", "warning", "disabled"]),
        "weight": st.sampled_from([0.5, 1.0, 2.0]),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(ACCOUNT, min_size=1, max_size=6),
    warm_mask=st.lists(st.booleans(), min_size=6, max_size=6),
    excluded_mask=st.lists(st.booleans(), min_size=6, max_size=6),
    max_skew=st.floats(0, 1),
    wait_s=st.sampled_from([None, 0.0, 30.0]),
)
def test_affinity_only_reorders_what_the_rules_allow_and_keeps_the_skew_bound(
    specs: list[dict[str, object]],
    warm_mask: list[bool],
    excluded_mask: list[bool],
    max_skew: float,
    wait_s: float | None,
) -> None:
    accounts = [view(f"a{i}", max_concurrency=2, **spec) for i, spec in enumerate(specs)]  # type: ignore[arg-type]
    warm = {a.name for a, w in zip(accounts, warm_mask, strict=False) if w}
    exclude = {a.name for a, x in zip(accounts, excluded_mask, strict=False) if x}
    plain = choose(accounts, JobNeeds(), now=NOW, exclude=exclude)
    until = None if wait_s is None else NOW + timedelta(seconds=wait_s)
    affine = choose(accounts, JobNeeds(), now=NOW, exclude=exclude, cache=CachePreference(warm, max_skew, until))
    if not isinstance(plain, list):
        assert affine == plain  # no account free: the same answer, affinity or not
        return
    if isinstance(affine, NoAccount):
        # It waits only for warm accounts the rules allow, and never past its limit.
        assert until is not None and NOW <= affine.ready_at <= until
        assert affine.accounts == [] and any(name in affine.reason for name in warm - exclude)
        assert not affine.permanent
        return
    # The same accounts — never one the rules exclude — only in another order.
    assert sorted(a.name for a in affine) == sorted(a.name for a in plain)
    by_name = {a.name: a for a in accounts}
    if affine[0].name != plain[0].name:
        first, least = by_name[affine[0].name], by_name[plain[0].name]
        assert first.name in warm
        used_first = utilization(first.state, NOW) / first.config.weight
        used_least = utilization(least.state, NOW) / least.config.weight
        assert used_first - used_least <= max_skew
        assert first.state.state != "warning" or least.state.state == "warning"
    # The rest keep today's order.
    assert [a.name for a in affine[1:]] == [a.name for a in plain if a.name != affine[0].name]


def test_a_job_waits_for_a_full_warm_account_until_its_limit_then_takes_a_cold_one() -> None:
    accounts = [view("cold"), view("warm", used=1, slot_free_in_s=5)]
    until = NOW + timedelta(seconds=30)
    waiting = choose(accounts, JobNeeds(), now=NOW, cache=CachePreference({"warm"}, 0.2, until))
    assert isinstance(waiting, NoAccount)
    assert "warm" in waiting.reason and waiting.ready_at == NOW + timedelta(seconds=5)
    assert waiting.accounts == []  # in no waiting line: it looks again at ready_at, by the limit at the latest
    assert not waiting.permanent and not waiting.cooldown
    later = NOW + timedelta(seconds=31)
    assert names(choose(accounts, JobNeeds(), now=later, cache=CachePreference({"warm"}, wait_until=until))) == ["cold"]
    # Without a limit (the default) it never waits.
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference({"warm"}, 0.2))) == ["cold"]


def test_a_job_never_waits_for_a_warm_account_that_is_cooling_or_past_the_skew() -> None:
    until = NOW + timedelta(seconds=30)
    for warm in (view("warm", used=1, cooldown_s=60), view("warm", used=1, util=0.9)):
        chosen = choose([view("cold"), warm], JobNeeds(), now=NOW, cache=CachePreference({"warm"}, wait_until=until))
        assert names(chosen) == ["cold"]


def test_of_two_warm_accounts_the_one_used_last_goes_first() -> None:
    # Both hold the prefix; the entry that expires later was refreshed last and is the likelier to be there.
    accounts = [view("a", util=0.1), view("b", util=0.15), view("c", util=0.2)]
    warm = {"a": 1_000.0, "c": 1_030.0}
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference(warm, 0.2))) == ["c", "a", "b"]
    # Past the skew it is not preferred, however fresh its entry.
    assert names(choose(accounts, JobNeeds(), now=NOW, cache=CachePreference(warm, 0.05))) == ["a", "b", "c"]
