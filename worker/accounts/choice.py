"""Which account runs a job: a pure function of the accounts' states, the job and the time (no Redis)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from claudeq.accounts import model_family
from claudeq.models import AccountState, ErrorKind, JobSpec

from ...config.account_pool import AccountConfig


@dataclass(frozen=True)
class AccountView:
    """One account as the chooser sees it: its configuration, its state, and when its first slot frees."""

    config: AccountConfig
    state: AccountState
    next_slot_free_at: datetime | None = None  # earliest expiry among its live slots

    @property
    def name(self) -> str:
        """The account's name."""
        return self.config.name

    def disabled(self) -> bool:
        """Disabled by an operator or a 401."""
        return self.state.state == "disabled"

    def cooling_until(self, now: datetime) -> datetime | None:
        """End of the cooldown, or None when not cooling (a cooldown in the past counts as over)."""
        until = self.state.cooldown_until
        return until if until is not None and until > now else None

    def held_until(self, now: datetime) -> datetime | None:
        """End of a hold (what the API said is left is spoken for by the runs in flight), or None."""
        until = self.state.held_until
        return until if until is not None and until > now else None

    def full(self) -> bool:
        """Every slot is taken."""
        return self.state.slots_in_use >= self.config.max_concurrency

    def reserved_until(self, now: datetime, family: str) -> tuple[datetime, bool] | None:
        """End of what keeps runs of model `family` off the account — a window at its ceiling or predicted to pass
        it, or the family's own cooldown — and whether it is only a prediction (it lifts when a run in flight ends);
        None when nothing does."""
        ends: list[tuple[datetime, bool]] = [
            (r.until, r.predicted)
            for r in self.state.reservations
            if r.until > now and (r.family == "-" or r.family == family)
        ]
        cooling = self.state.family_cooldowns.get(family)
        if cooling is not None and cooling > now:
            ends.append((cooling, False))
        if not ends:
            return None
        hard = [at for at, predicted in ends if not predicted]
        return (max(hard), False) if hard else (max(at for at, _ in ends), True)


@dataclass(frozen=True)
class JobNeeds:
    """What the choice rule reads about the job: the models a run of it may answer on (its model and the fallback
    the CLI may switch to by itself), the account it is pinned to, and its model family (windows and cooldowns of
    other families do not hold it back). The defaults: any model, any account, the whole account's windows."""

    model: str | None = None
    pin: str | None = None  # the spec's `account`
    fallback_model: str | None = None
    family: str = "-"  # claudeq/accounts/_store.py `model_family` of `model`

    @classmethod
    def of(cls, spec: JobSpec) -> JobNeeds:
        """What the job's spec asks of an account."""
        return cls(spec.model, spec.account, spec.fallback_model, model_family(spec.model))


@dataclass(frozen=True)
class CachePreference:
    """The job's cache affinity as the choice rule reads it (docs/architecture.md#cache-affinity): the accounts whose
    prompt cache holds its prefix (with the expiry of each entry when known), how much more used (utilization per
    weight) a warm account may be than the least used one and still go first, and until when the job waits for a
    warm account whose slots are all taken rather than take a cold one (None: it never waits). The default: none."""

    warm: Collection[str] | Mapping[str, float] = ()
    max_skew: float = 0.0
    wait_until: datetime | None = None


#: No account is warm: the choice is the usual order.
NO_PREFERENCE = CachePreference()


@dataclass(frozen=True)
class NoAccount:
    """No account can take the job now: when to look again, why, and which accounts it waits for."""

    ready_at: datetime  # earliest moment an eligible account may free (cooldown end / slot lease expiry)
    reason: str
    accounts: list[str]  # the accounts it waits for, soonest first
    permanent: bool = False  # nothing can ever run it -> fail the job
    cooldown: bool = False  # ready_at is the end of a rate-limit cooldown (not a slot freeing up)
    kind: ErrorKind | None = None  # the error kind when permanent and not the usual (`budget_exceeded`)
    tenant: str | None = None  # it waits for one of this tenant's runs to end (its max_concurrency)


def utilization(state: AccountState, now: datetime) -> float:
    """The highest utilization over the account's windows that have not reset yet (unknown = 0)."""
    values = [
        w.utilization
        for w in state.windows.values()
        if w.utilization is not None and (w.resets_at is None or w.resets_at > now)
    ]
    return max(values, default=0.0)


def _order(view: AccountView, index: int, now: datetime) -> tuple[bool, float, float, int]:
    # Warned accounts last; then least used per weight; then least loaded; then pool order (deterministic ties).
    weight = view.config.weight
    load = view.state.slots_in_use / view.config.max_concurrency
    return (view.state.state == "warning", utilization(view.state, now) / weight, load / weight, index)


#: Why an account was chosen, as the job's `run_started` event says (docs/architecture.md#cache-affinity).
WARM_CACHE = "warm cache"
LEAST_USED = "least used"


def _used(view: AccountView, now: datetime) -> float:
    return utilization(view.state, now) / view.config.weight


def prefer_warm(
    ready: list[AccountView], warm: Collection[str] | Mapping[str, float], max_skew: float, now: datetime
) -> list[AccountView]:
    """`ready` (best first by today's rule) with the best account whose cache holds the job's prefix moved to the
    front — while it is used at most `max_skew` (utilization per weight) more than the least used one and is no
    more warned than it. With expiries (`warm` a mapping), the one whose entry lives longest: it was used last, so
    its entry is the likeliest to be there when the request comes. Never adds an account: only the order changes."""
    if not ready or not warm:
        return ready
    least = _used(ready[0], now)
    warned = ready[0].state.state == "warning"
    candidates = [
        index
        for index, view in enumerate(ready)
        if view.name in warm and _used(view, now) - least <= max_skew and (warned or view.state.state != "warning")
    ]
    if not candidates:
        return ready
    index = candidates[0]
    if isinstance(warm, Mapping):
        index = max(candidates, key=lambda i: (warm[ready[i].name], -i))
    return [ready[index], *ready[:index], *ready[index + 1 :]]


def reason_for(account: str, warm: Collection[str]) -> str:
    """What the job's events say about the choice of `account`."""
    return WARM_CACHE if account in warm else LEAST_USED


def _allows(view: AccountView, job: JobNeeds) -> bool:
    """Whether the account's `models` allow every model a run may answer on: its model and, when set, the fallback
    the CLI switches to by itself (claudeq/permissions.py `spec_models`)."""
    return view.config.allows_model(job.model) and (
        job.fallback_model is None or view.config.allows_model(job.fallback_model)
    )


def eligible(accounts: Sequence[AccountView], job: JobNeeds) -> list[str]:
    """The accounts that may ever run the job (pinned, allowing its models, not disabled), in pool order: the lines
    it waits in, so that a slot freeing on any of them is handed to it."""
    return [a.name for a in accounts if (job.pin is None or a.name == job.pin) and _allows(a, job) and not a.disabled()]


def choose(
    accounts: Sequence[AccountView],
    job: JobNeeds,
    *,
    now: datetime,
    exclude: Collection[str] = frozenset(),
    cache: CachePreference = NO_PREFERENCE,
) -> list[AccountConfig] | NoAccount:
    """Eligible accounts, best first; or NoAccount saying when to look again (or that nothing ever can). `exclude`:
    accounts not to take this time (they count as free later). `cache`: the accounts whose prompt cache holds the
    job's prefix, preferred within its skew (`prefer_warm`); until its `wait_until` a job waits for a warm account
    whose slots are all taken rather than take a cold one (`_wait_for_warm`)."""
    pin, family = job.pin, job.family
    if not accounts:
        return NoAccount(now, "no accounts are configured", [], permanent=True)
    pool = list(enumerate(accounts))
    if pin is not None:
        pool = [(i, a) for i, a in pool if a.name == pin]
        if not pool:
            return NoAccount(now, f"pinned account {pin!r} is not configured", [], permanent=True)
    allowed = [(i, a) for i, a in pool if _allows(a, job)]
    if not allowed:
        where = f"pinned account {pin!r}" if pin is not None else "no configured account"
        also = f" with fallback_model {job.fallback_model!r}" if job.fallback_model is not None else ""
        return NoAccount(now, f"{where} allows model {job.model!r}{also}", [], permanent=True)
    live = [(i, a) for i, a in allowed if not a.disabled()]
    if not live:
        if pin is not None:
            reason = f"pinned account {pin!r} is disabled: {allowed[0][1].state.reason or 'no reason given'}"
        else:
            reason = "every account that may run it is disabled"
        return NoAccount(now, reason, [], permanent=True)

    ready = [
        (i, a)
        for i, a in live
        if a.name not in exclude
        and a.cooling_until(now) is None
        and a.held_until(now) is None
        and a.reserved_until(now, family) is None
        and not a.full()
    ]
    if ready:
        ready.sort(key=lambda item: _order(item[1], item[0], now))
        ordered = prefer_warm([a for _, a in ready], cache.warm, cache.max_skew, now)
        if cache.wait_until is not None and cache.wait_until > now and ordered[0].name not in cache.warm:
            waiting = _wait_for_warm(live, ordered[0], cache, now, exclude, family)
            if waiting is not None:
                return waiting
        return [a.config for a in ordered]
    return _wait(live, now, exclude, family)


def _wait_for_warm(
    live: list[tuple[int, AccountView]],
    least: AccountView,
    cache: CachePreference,
    now: datetime,
    exclude: Collection[str],
    family: str,
) -> NoAccount | None:
    """When no warm account is free but one only lacks a free slot (and is within the skew of the least used free
    account): wait for its slot, at most until the preference's `wait_until`; None when there is none to wait for."""
    assert cache.wait_until is not None  # choose waits only with a limit
    until, max_skew = cache.wait_until, cache.max_skew
    full = [
        view
        for _, view in live
        if view.name in cache.warm
        and view.name not in exclude
        and view.full()
        and view.cooling_until(now) is None
        and view.held_until(now) is None
        and view.reserved_until(now, family) is None
        and _used(view, now) - _used(least, now) <= max_skew
    ]
    if not full:
        return None
    ready_at = min(min(view.next_slot_free_at or until for view in full), until)
    names = ", ".join(view.name for view in full)
    reason = f"waiting until {until.isoformat()} at the latest for {names}, whose prompt cache holds the job's prefix"
    # In no account's waiting line: a job in line waits for a release (or the fallback), and this one must look
    # again by `until` at the latest, when a cold account takes it.
    return NoAccount(max(ready_at, now), reason, [])


def _wait(live: list[tuple[int, AccountView]], now: datetime, exclude: Collection[str], family: str) -> NoAccount:
    """When the soonest of the live accounts may take the job."""
    free_at: list[tuple[datetime, int, str, bool]] = []
    cooling = full = excluded = held = reserved = 0
    for index, view in live:
        until = view.cooling_until(now)
        hold = view.held_until(now)
        reservation = view.reserved_until(now, family)
        if until is not None:
            cooling += 1
            at = until
        elif hold is not None:
            held += 1
            # A run in flight ending frees its share earlier (its release promotes a waiter); the reset is the bound.
            until = hold
            at = min(hold, view.next_slot_free_at or hold)
        elif reservation is not None:
            reserved += 1
            # At its ceiling: until the window resets (the waiting line admits the job then). Predicted only: a run
            # in flight ending may lift it earlier (its release admits a waiter).
            at, predicted = reservation
            if predicted:
                at = min(at, view.next_slot_free_at or at)
        elif view.full():
            full += 1
            # A slot released earlier than its expiry promotes a waiter anyway; the expiry is the latest bound.
            at = view.next_slot_free_at or now
        else:
            excluded += 1  # free, but the caller excluded it for this try: it may take the job again later
            at = now
        free_at.append((max(at, now), index, view.name, until is not None))
    free_at.sort()
    ready_at = free_at[0][0]
    parts = []
    if cooling:
        parts.append(f"{cooling} cooling")
    if held:
        parts.append(f"{held} holding back (rate-limit headroom used up until the window resets)")
    if reserved:
        parts.append(f"{reserved} reserved (a window at or near its utilization ceiling until it resets)")
    if full:
        parts.append(f"{full} at max concurrency")
    if excluded:
        parts.append(f"{excluded} excluded for this attempt")
    reason = f"no account free ({', '.join(parts)}); earliest at {ready_at.isoformat()}"
    return NoAccount(ready_at, reason, [name for _, _, name, _ in free_at], cooldown=free_at[0][3])
