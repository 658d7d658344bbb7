"""AccountStore: what Redis holds about each account (state, cooldown, windows, counters) and its slot semaphore.

The CLI and the exporter read accounts through this class without importing `worker`; the worker's AccountManager
makes the decisions and writes through it.

The account hash `keys.account(name)` holds:
  state            `ok` | `warning` | `disabled` (persistent; `cooling` is derived from `cooldown_until`)
  disabled_reason  why an operator or a 401 disabled it
  cooldown_until   epoch s; the account takes no new run before then (a past value means not cooling)
  cooldown_reason  why it cools (the rejected window and its reset)
  w:<window>       JSON WindowInfo: last status, utilization, resets_at, type, seen_at of that window
  warn_window      the window of the last `allowed_warning`
  n:<counter>      counters (acquired, rejected, warnings, cooled, auth_failed, disabled)
  rq_rem, rq_reset, rq_lim  the last `requests-remaining` the API reported, its window's reset (epoch s), its limit
  tk_rem, tk_reset, tk_lim  the same for the tightest token family; tk_est: tokens one request takes, about
  bo_n             429s without a hint in a row (adaptive backoff); a success clears it
  pws, pu:<window> the windows reporting a utilization, each "utilization reset est ceiling family k" (window-aware
                   admission: docs/architecture.md#window-aware-admission)
  cd:<family>, cd_why:<family>  a model family's cooldown (a 429 on its own window) and why
  ramp_at, ramp_j, ramp_last, ramp_n  when the last cooldown or reservation ended, the ramp's jitter, the last start
                   since and how many started
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from pydantic import ValidationError

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.errors import UnknownAccount
from claudeq.keys import Keys, text
from claudeq.models import AccountState, AccountStateName, Reservation, WindowInfo
from claudeq.script_calls import PipeCall, ScriptCall, run_call

from . import _scripts as account_scripts

#: How long an hour of an account's per-minute history lives after its last write (the fleet page draws the last
#: HISTORY_HOURS hours of it: docs/web.md#the-fleet-in-pictures).
HISTORY_TTL_S = 4 * 3600
HISTORY_HOURS = 3
#: The account counters also kept per minute in that history.
HISTORY_COUNTERS = ("rejected", "warnings")

#: Model families with waiting lines and windows of their own (`-`: a job for no particular family, and the windows
#: that apply to every job). Order matters: the scripts index it.
FAMILIES: tuple[str, ...] = ("-", "opus", "sonnet", "haiku")


def model_family(model: str | None) -> str:
    """The family of a job's model (`opus`, `sonnet`, `haiku`), `-` for the default model or any other."""
    if not model:
        return "-"
    lowered = model.lower()
    return next((family for family in FAMILIES[1:] if family in lowered), "-")


def window_family(window: str) -> str:
    """The model family a window applies to: `seven_day_opus` -> `opus`; `-` for windows every job counts against."""
    if window.startswith("seven_day_"):
        suffix = window[len("seven_day_") :]
        if suffix in FAMILIES:
            return suffix
    return "-"


def _epoch(value: datetime) -> float:
    return value.timestamp()


def _from_epoch(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class Waiter:
    """A deferred job joining the waiting lines (`AccountStore.add_waiter_call`): `rank` (lower first) orders its
    model `family`'s line of each account; `tenant_line`, when tenants order the lines (priority within a tenant):
    its tenant's line key and its score there."""

    job_id: str
    rank: float
    family: str = "-"
    tenant_line: tuple[str, float] | None = None


@dataclass(frozen=True)
class _SlotParts:
    """What an account's slot scripts (ACQUIRE, and the handout RELEASE, ADMIT and FINISH make) are given that never
    changes for that account: its configuration, its slots and state keys, its waiting lines' keys, its ramp rate as
    sent. Built once per account (`AccountStore._parts`): the engine takes and frees a slot per job."""

    config: AccountConfig
    slots: str
    account: str
    lines: tuple[str, ...]
    ramp_rate: str


class AccountStore:
    """Reads and writes account state and slots in Redis; every multi-step change is one Lua script."""

    def __init__(
        self, client: redis.Redis, keys: Keys, pool: AccountPool, *, predictive: bool = True, jitter_s: float = 0.0
    ) -> None:
        self.redis = client
        self.keys = keys
        self.pool = pool
        #: Window-aware admission predicts from each window's utilization per request (docs/architecture.md).
        self.predictive = predictive
        #: Each ramp after a cooldown or reservation waits a random 0..jitter_s s before its first start.
        self.jitter_s = jitter_s
        self._acquire = client.register_script(account_scripts.ACQUIRE)
        self._release = client.register_script(account_scripts.RELEASE)
        self._cool = client.register_script(account_scripts.COOL)
        self._set_state = client.register_script(account_scripts.SET_STATE)
        self._add_waiter = client.register_script(account_scripts.ADD_WAITER)
        self._admit = client.register_script(account_scripts.ADMIT)
        self._backoff = client.register_script(account_scripts.BACKOFF)
        self._record_limits = client.register_script(account_scripts.RECORD_LIMITS)
        self._record_util = client.register_script(account_scripts.RECORD_UTIL)
        self._slot_parts: dict[str, _SlotParts] = {}
        self._job_key_prefix = keys.job("")

    def config(self, name: str) -> AccountConfig:
        """The configured account `name`; UnknownAccount otherwise."""
        account = self.pool.get(name)
        if account is None:
            raise UnknownAccount(name)
        return account

    # ---- reads -----------------------------------------------------------------------------------------------

    def states(self, now: float | None = None) -> list[AccountState]:
        """Every configured account's current state, in pool order."""
        return [state for state, _ in run_call(self.snapshot_call(now))]

    def state(self, name: str, now: float | None = None) -> AccountState:
        """One account's current state; UnknownAccount if it is not configured."""
        self.config(name)
        return next(state for state, _ in run_call(self.snapshot_call(now)) if state.name == name)

    def snapshot_call(self, now: float | None = None) -> PipeCall[list[tuple[AccountState, datetime | None]]]:
        """(state, earliest live slot expiry) per configured account, read in one round trip. The live slots are
        counted (ZCOUNT) and only the earliest is read: O(log n) in the runs in flight, not a copy of every slot."""
        at = time.time() if now is None else now

        def queue(pipe: Any) -> None:
            for account in self.pool.accounts:
                slots_key = self.keys.account_slots(account.name)
                pipe.hgetall(self.keys.account(account.name))
                pipe.zcount(slots_key, f"({at}", "+inf")
                pipe.zrangebyscore(slots_key, f"({at}", "+inf", start=0, num=1, withscores=True)

        return PipeCall(self.redis, queue, lambda replies: self._parse_snapshot(replies, at))

    def _parse_snapshot(self, replies: list[Any], now: float) -> list[tuple[AccountState, datetime | None]]:
        out: list[tuple[AccountState, datetime | None]] = []
        for i, account in enumerate(self.pool.accounts):
            raw = {text(k): text(v) for k, v in replies[3 * i].items()}
            in_use = int(replies[3 * i + 1])
            earliest: list[tuple[Any, float]] = replies[3 * i + 2]
            state = parse_state(account, raw, slots_in_use=in_use, now=now, predictive=self.predictive)
            first_free = datetime.fromtimestamp(float(earliest[0][1]), UTC) if earliest else None
            out.append((state, first_free))
        return out

    def slot_holders(self, name: str, now: float | None = None) -> dict[str, float]:
        """Job id -> slot expiry (epoch s) of the live slots on `name`."""
        now = time.time() if now is None else now
        rows: list[Any] = self.redis.zrangebyscore(self.keys.account_slots(name), f"({now}", "+inf", withscores=True)
        return {text(row[0]): float(row[1]) for row in rows}

    def held_by_call(
        self, job_id: str, now: float | None = None, among: Collection[str] | None = None
    ) -> PipeCall[list[str]]:
        """Accounts on which `job_id` holds a live slot (normally none or one); only those in `among` are looked at
        (None: every account; names or slots keys). No account to look at: no command (an empty pipeline)."""
        accounts = [
            a
            for a in self.pool.accounts
            if among is None or a.name in among or self.keys.account_slots(a.name) in among
        ]

        def parse(scores: list[Any]) -> list[str]:
            at = time.time() if now is None else now
            return [a.name for a, score in zip(accounts, scores, strict=True) if score and float(score) > at]

        return PipeCall(
            self.redis,
            lambda pipe: [pipe.zscore(self.keys.account_slots(account.name), job_id) for account in accounts],
            parse,
        )

    def waiters(self, name: str) -> list[str]:
        """Job ids waiting for a slot on `name`, first in line first (best rank: priority, then age), all families."""
        pipe = self.redis.pipeline(transaction=False)
        for family in FAMILIES:
            pipe.zrange(self.keys.account_waiters(name, family), 0, -1, withscores=True)
        rows = [(float(score), text(member)) for reply in pipe.execute() for member, score in reply]
        return [member for _, member in sorted(rows)]

    # ---- the semaphore and its waiting lines -------------------------------------------------------------------

    def _lines(self, name: str) -> list[str]:
        return [self.keys.account_waiters(name, family) for family in FAMILIES]

    def _parts(self, name: str) -> _SlotParts:
        """The configured account `name`'s `_SlotParts` (UnknownAccount otherwise); built again should the pool
        name another configuration for it."""
        account = self.config(name)
        parts = self._slot_parts.get(name)
        if parts is None or parts.config is not account:
            slots, state = self.keys.account_slots(name), self.keys.account(name)
            parts = _SlotParts(account, slots, state, tuple(self._lines(name)), repr(account.ramp_starts_per_s))
            self._slot_parts[name] = parts
        return parts

    def _job_keys(self) -> list[str]:
        return [self.keys.deferred, self.keys.queued]

    def _jitter(self) -> str:
        return repr(round(random.uniform(0.0, self.jitter_s), 3)) if self.jitter_s > 0 else "0"

    def acquire_call(
        self,
        name: str,
        job_id: str,
        ttl_s: float,
        now: float | None = None,
        rank: float | None = None,
        family: str = "-",
        may_hold: bool = True,
    ) -> ScriptCall[int]:
        """Take a slot on `name` for a job of model `family` -> a `Slot` code (claudeq/lua/results.py): ACQUIRED
        (or already held, e.g. handed over by a release), FULL, DISABLED, COOLING (the account or the family), HELD
        (what the API said is left is spoken for by the runs in flight), IN_LINE (the free slots belong to waiters
        ranked before `rank`; None: no waiting line is consulted), RESERVED (a window at its ceiling, or predicted to
        pass it), RAMPING.
        `may_hold` False: the caller knows the job holds no slot here (the script skips looking for one). The
        worker makes it into a call that does more in the same script (its attempt start: WorkerJobStore.start_call).
        """
        parts = self._parts(name)
        now = time.time() if now is None else now
        return account_scripts.AcquireArgs(
            slots=parts.slots,
            account=parts.account,
            lines=parts.lines,
            job_id=job_id,
            max_concurrency=parts.config.max_concurrency,
            expiry_s=repr(now + ttl_s),
            now_s=repr(now),
            rank="" if rank is None else repr(rank),
            job_key_prefix=self._job_key_prefix,
            family=FAMILIES.index(family) + 1,
            predictive="1" if self.predictive else "",
            ramp_rate=parts.ramp_rate,
            jitter_s=self._jitter(),
            may_hold="1" if may_hold else "",
        ).call(self._acquire, int)

    def refresh(self, name: str, job_id: str, ttl_s: float, now: float | None = None) -> bool:
        """Extend a held slot's expiry (ZADD XX); False when the slot is no longer held."""
        now = time.time() if now is None else now
        return bool(self.redis.zadd(self.keys.account_slots(name), {job_id: now + ttl_s}, xx=True, ch=True))

    def release_call(
        self, name: str, job_id: str, ttl_s: float = 15.0, now: float | None = None
    ) -> ScriptCall[list[str]]:
        """Free `job_id`'s slot on `name` and hand the free slots to the best waiters still deferred: returns their
        ids, already moved to `queued` with a slot each (expiring after `ttl_s`); the caller sends their messages."""
        handout = self.handout(name, ttl_s, now)
        return account_scripts.ReleaseArgs(job_id=job_id, **vars(handout)).call(self._release, _texts)

    def handout(self, name: str, ttl_s: float, now: float | None) -> account_scripts.AdmitArgs:
        """What hands `name`'s free slots to its waiters: ADMIT's arguments, which RELEASE and FINISH take too."""
        parts = self._parts(name)
        now = time.time() if now is None else now
        return account_scripts.AdmitArgs(
            slots=parts.slots,
            account=parts.account,
            lines=parts.lines,
            deferred=self.keys.deferred,
            queued=self.keys.queued,
            job_key_prefix=self._job_key_prefix,
            now_s=repr(now),
            max_concurrency=parts.config.max_concurrency,
            expiry_s=repr(now + ttl_s),
            predictive="1" if self.predictive else "",
            ramp_rate=parts.ramp_rate,
            jitter_s=self._jitter(),
        )

    def admit_call(self, name: str, ttl_s: float = 15.0, now: float | None = None) -> ScriptCall[list[str]]:
        """Hand `name`'s free slots to its best waiters still deferred (as `release_call` does, without freeing one)."""
        return self.handout(name, ttl_s, now).call(self._admit, _texts)

    def add_waiter_call(
        self,
        names: Iterable[str],
        waiter: Waiter,
        ttl_s: float = 15.0,
        now: float | None = None,
        fallback_s: float = 300.0,
    ) -> ScriptCall[list[str]] | None:
        """Put a deferred job (`waiter`) in its family's waiting line of each of `names` at its rank (a job already
        in a line keeps its place) and move its ready time out to `fallback_s` from now (never earlier: a freed slot
        is handed to it, the ready time is only the fallback), then let each account admit its best waiters into its
        free slots. Returns the ids admitted (now `queued`, each holding a slot): the caller sends their messages.
        The waiter itself is among them when it is first in line for a slot that is free right now. None: no account
        to wait on (nothing to send)."""
        now, tenant_line = time.time() if now is None else now, waiter.tenant_line
        accounts = [self.config(name) for name in names]
        if not accounts:
            return None
        account_keys: list[str] = []
        account_args: list[str | int] = []
        for account in accounts:
            account_keys += [
                self.keys.account_slots(account.name),
                self.keys.account(account.name),
                *self._lines(account.name),
            ]
            account_args += [account.max_concurrency, repr(account.ramp_starts_per_s)]
        return account_scripts.AddWaiterArgs(
            deferred=self.keys.deferred,
            queued=self.keys.queued,
            account_keys=account_keys,
            job_id=waiter.job_id,
            rank=repr(waiter.rank),
            job_key_prefix=self.keys.job(""),
            now_s=repr(now),
            expiry_s=repr(now + ttl_s),
            family=FAMILIES.index(waiter.family) + 1,
            predictive="1" if self.predictive else "",
            jitter_s=self._jitter(),
            fallback_s=repr(now + fallback_s),
            tenant_line="" if tenant_line is None else tenant_line[0],
            tenant_score="" if tenant_line is None else repr(tenant_line[1]),
            account_args=account_args,
        ).call(self._add_waiter, _texts)

    # ---- state writes ----------------------------------------------------------------------------------------

    def record_window(self, name: str, window: str, info: WindowInfo) -> None:
        """Store the last rate-limit information seen for one window."""
        self.redis.hset(self.keys.account(name), f"w:{window}", info.model_dump_json())

    def record_limits(
        self,
        name: str,
        windows: dict[str, WindowInfo],
        *,
        requests: tuple[int, float, int | None] | None,
        tokens: tuple[int, float, int | None] | None,
        tokens_per_request: float | None,
        success: bool,
    ) -> None:
        """Store what one response said: its windows, and the readings admission holds on ((remaining, reset,
        limit))."""
        key = self.keys.account(name)
        pipe = self.redis.pipeline(transaction=False)
        if windows:
            pipe.hset(key, mapping={f"w:{w}": info.model_dump_json() for w, info in windows.items()})
        (rq_rem, rq_reset, rq_lim), (tk_rem, tk_reset, tk_lim) = _reading_args(requests), _reading_args(tokens)
        args = account_scripts.RecordLimitsArgs(
            account=key,
            rq_rem=rq_rem,
            rq_reset=rq_reset,
            rq_lim=rq_lim,
            tk_rem=tk_rem,
            tk_reset=tk_reset,
            tk_lim=tk_lim,
            tk_est="" if tokens_per_request is None else repr(round(tokens_per_request, 1)),
            success="1" if success else "",
        )
        self._record_limits(keys=args.keys(), args=args.argv(), client=pipe)
        pipe.execute()

    def backoff(self, name: str, now: float, base_s: float, cap_s: float, reason: str) -> tuple[datetime, int]:
        """Cool after a 429 without a hint: base * 2^(n-1) s, at most cap, n the rejections in a row."""
        args = account_scripts.BackoffArgs(
            account=self.keys.account(name),
            now_s=repr(now),
            base_s=repr(base_s),
            cap_s=repr(cap_s),
            reason=reason,
            jitter_s=self._jitter(),
        )
        until, n = self._backoff(keys=args.keys(), args=args.argv())
        return datetime.fromtimestamp(float(text(until)), UTC), int(n)

    def set_warning(self, name: str, window: str | None) -> None:
        """Mark the account `warning` (unless disabled): it is chosen last."""
        self._set_state_unless_disabled(name, "warning", warn_window=window or "")

    def clear_warning(self, name: str) -> None:
        """Back to `ok` after an `allowed` signal (unless disabled)."""
        self._set_state_unless_disabled(name, "ok", warn_window="")

    def cool(self, name: str, until: datetime, reason: str, family: str = "-") -> bool:
        """Cool until `until` (never shortens a longer cooldown); True when the cooldown was extended. A model
        `family` other than `-` cools only that family's jobs on the account."""
        args = account_scripts.CoolArgs(
            account=self.keys.account(name),
            until_s=repr(_epoch(until)),
            reason=reason,
            jitter_s=self._jitter(),
            family="" if family == "-" else family,
        )
        return bool(self._cool(keys=args.keys(), args=args.argv()))

    def record_utilization(self, name: str, readings: list[tuple[str, float, float]]) -> None:
        """Store (window, utilization, reset epoch s) readings of one response, with the account's ceiling for each
        window: what window-aware admission decides on."""
        account = self.config(name)
        windows: list[str] = []
        for window, utilization, reset in readings:
            windows += [window, repr(utilization), repr(reset), repr(account.ceiling(window)), window_family(window)]
        if windows:
            args = account_scripts.RecordUtilArgs(
                account=self.keys.account(name), jitter_s=self._jitter(), windows=windows
            )
            self._record_util(keys=args.keys(), args=args.argv())

    def clear_cooldown(self, name: str) -> None:
        """End a cooldown now, the model families' too (operator)."""
        self.config(name)
        fields = ["cooldown_until", "cooldown_reason"]
        for family in FAMILIES[1:]:
            fields += [f"cd:{family}", f"cd_why:{family}"]
        self.redis.hdel(self.keys.account(name), *fields)

    def disable(self, name: str, reason: str) -> None:
        """Disable: no new run goes to the account until it is enabled."""
        self.config(name)
        key = self.keys.account(name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, mapping={"state": "disabled", "disabled_reason": reason})
        pipe.hincrby(key, "n:disabled", 1)
        pipe.execute()

    def enable(self, name: str) -> None:
        """Enable a disabled account (its cooldown, if any, still applies)."""
        self.config(name)
        key = self.keys.account(name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, "state", "ok")
        pipe.hdel(key, "disabled_reason", "warn_window")
        pipe.execute()

    def incr(self, name: str, counter: str, by: int = 1, now: float | None = None) -> None:
        """Add to one of the account's counters; a rate-limit signal's also to this minute's history (a signal is
        rare: two more commands in the same round trip)."""
        if counter not in HISTORY_COUNTERS:
            self.redis.hincrby(self.keys.account(name), f"n:{counter}", by)
            return
        minute = int((time.time() if now is None else now) // 60)
        history = self.keys.account_history(name, minute // 60)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(self.keys.account(name), f"n:{counter}", by)
        pipe.hincrby(history, f"{counter}:{minute}", by)
        pipe.expire(history, HISTORY_TTL_S)
        pipe.execute()

    def _set_state_unless_disabled(self, name: str, state: str, warn_window: str) -> None:
        args = account_scripts.SetStateArgs(account=self.keys.account(name), state=state, warn_window=warn_window)
        self._set_state(keys=args.keys(), args=args.argv())


def parse_state(
    account: AccountConfig, raw: dict[str, str], *, slots_in_use: int, now: float, predictive: bool = True
) -> AccountState:
    """Build the effective AccountState from the stored hash: an expired cooldown or warning reads as `ok`; an
    account with a window at its ceiling (one that applies to every job) reads as `reserved`."""
    windows: dict[str, WindowInfo] = {}
    counters: dict[str, int] = {}
    for field, value in raw.items():
        if field.startswith("w:"):
            try:
                windows[field[2:]] = WindowInfo.model_validate_json(value)
            except ValidationError:
                continue  # written by another version: skip rather than hide the account
        elif field.startswith("n:"):
            try:
                counters[field[2:]] = int(value)
            except ValueError:
                continue
    cooldown_until = _from_epoch(raw.get("cooldown_until"))
    cooling = cooldown_until is not None and cooldown_until.timestamp() > now
    kept = reservations(raw, slots_in_use, now, predictive)
    family_cooldowns = {
        family: until
        for family in FAMILIES[1:]
        if (until := _from_epoch(raw.get(f"cd:{family}"))) is not None and until.timestamp() > now
    }
    stored = raw.get("state", "ok")
    state: AccountStateName
    reason: str | None = None
    if stored == "disabled":
        state, reason = "disabled", raw.get("disabled_reason") or None
    elif cooling:
        state, reason = "cooling", raw.get("cooldown_reason") or None
    elif general := [r for r in kept if r.family == "-" and not r.predicted]:
        first = max(general, key=lambda r: r.until)
        state = "reserved"
        reason = (
            f"{first.window} utilization {first.utilization:.2f} at its ceiling {first.ceiling:.2f} "
            f"until {first.until.isoformat()}"
        )
    elif stored == "warning" and _warning_live(windows.get(raw.get("warn_window", "")), now):
        window = raw.get("warn_window", "")
        state = "warning"
        info = windows.get(window)
        reason = f"{window} utilization {info.utilization:.2f}" if info and info.utilization is not None else None
    else:
        state = "ok"
    hold = held(raw, slots_in_use, now)
    return AccountState(
        name=account.name,
        state=state,
        reason=reason,
        cooldown_until=cooldown_until if cooling else None,
        held_until=hold[0] if hold else None,
        held_reason=hold[1] if hold else None,
        reservations=kept,
        family_cooldowns=family_cooldowns,
        windows=windows,
        slots_in_use=slots_in_use,
        max_concurrency=account.max_concurrency,
        counters=counters,
    )


def reservations(raw: dict[str, str], slots_in_use: int, now: float, predictive: bool = True) -> list[Reservation]:
    """The windows keeping new runs off the account (the `reserved` rule of claudeq/lua/lib/gate.lua, in Python).

    A window that has not reset is at its ceiling (utilization >= ceiling), or, predictive, would likely pass it
    with the n > 0 runs in flight and one more: utilization + (n + 1) * est > ceiling, est being what one request
    added (before any rise was seen: utilization / the readings of this window).
    """
    out: list[Reservation] = []
    for window in raw.get("pws", "").split():
        parts = raw.get(f"pu:{window}", "").split()
        if len(parts) != 6:
            continue
        try:
            utilization, reset, est, ceiling, readings = (float(p) for p in (*parts[:4], parts[5]))
        except ValueError:
            continue
        if reset <= now:
            continue
        if est <= 0 and readings > 0:
            est = utilization / readings  # no rise seen yet: every use of the window counted as ours
        hit = utilization >= ceiling - 1e-9
        n = slots_in_use
        predicted = not hit and predictive and n > 0 and est > 0 and utilization + (n + 1) * est > ceiling + 1e-9
        if hit or predicted:
            out.append(
                Reservation(
                    window=window,
                    family=parts[4],
                    until=datetime.fromtimestamp(reset, UTC),
                    utilization=utilization,
                    ceiling=ceiling,
                    predicted=predicted,
                )
            )
    return out


def _reading_args(reading: tuple[int, float, int | None] | None) -> tuple[str, str, str]:
    if reading is None:
        return "", "", ""
    remaining, reset, limit = reading
    return str(remaining), repr(reset), "" if limit is None else str(limit)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def held(raw: dict[str, str], slots_in_use: int, now: float) -> tuple[datetime, str] | None:
    """Whether the account holds new runs back (the `held` rule of claudeq/lua/lib/held.lua): until when and why.

    What the API last said is left (requests, or tokens at about `tk_est` per request), minus what the runs in
    flight may still take (one request each), is nothing: a new run now would likely be rejected. The hold ends at
    the window's reset, or earlier when a run in flight ends. Once a window has reset, its limit is what is left
    (held only when the runs in flight alone reach it; looked at again a second later).
    """
    for prefix, what, per_run in (("rq", "requests", 1.0), ("tk", "tokens", _number(raw.get("tk_est")) or 0.0)):
        remaining, reset = _number(raw.get(f"{prefix}_rem")), _number(raw.get(f"{prefix}_reset"))
        limit = _number(raw.get(f"{prefix}_lim"))
        if remaining is not None and reset is not None and reset > now:
            left, until = remaining, reset
        elif limit is not None:
            left, until = limit, now + 1.0
        else:
            continue
        if left - slots_in_use * per_run <= 0:
            return datetime.fromtimestamp(until, UTC), f"{left:.0f} {what} left, {slots_in_use} run(s) in flight"
    return None


def _warning_live(info: WindowInfo | None, now: float) -> bool:
    # A warning about a window that has since reset no longer says anything about the account.
    if info is None or info.resets_at is None:
        return True
    return info.resets_at.timestamp() > now


def _texts(replies: list[Any]) -> list[str]:
    return [text(r) for r in replies]
