"""The Lua scripts for the per-account semaphore and account state: each runs atomically inside Redis.

Their text is in `claudeq/lua/account/` (each file's header says its KEYS, ARGV and answer), the admission functions
they share in `claudeq/lua/lib/` (docs/architecture.md#lua-scripts). Times are epoch seconds passed in by the caller
(every worker and the CLI use their own clock, as the job store does). The account hash fields are described in
claudeq/accounts/_store.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from claudeq.lua import script
from claudeq.script_args import Arg, ScriptArgs, key

#: Take a slot of the account for a job (the attempt's start in the same script on a worker: START in
#: claudeq/worker/store/worker_job_scripts.py).
ACQUIRE = script("account/acquire.lua")
#: Free a job's slot and hand the free slots to the best waiters.
RELEASE = script("account/release.lua")
#: The promoter's pass over an account: hand its free slots to its best waiters.
ADMIT = script("account/admit.lua")
#: Cool the account, or one model family of it.
COOL = script("account/cool.lua")
#: Set ok/warning, never over `disabled`.
SET_STATE = script("account/set_state.lua")
#: Put a deferred job in its family's waiting line of each account, then let each admit.
ADD_WAITER = script("account/add_waiter.lua")
#: Cool for an adaptive backoff after a 429 that said nothing about when to come back.
BACKOFF = script("account/backoff.lua")
#: Record the request and token readings behind admission.
RECORD_LIMITS = script("account/record_limits.lua")
#: Record the utilization readings behind window-aware admission.
RECORD_UTIL = script("account/record_util.lua")


# ---- the scripts' arguments, by name (claudeq/script_args.py) ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AdmitArgs(ScriptArgs):
    SCRIPT = "account/admit.lua"
    slots: str = key()
    account: str = key()
    lines: Sequence[str] = key()
    deferred: str = key()
    queued: str = key()
    job_key_prefix: str
    now_s: str
    max_concurrency: int
    expiry_s: str
    predictive: str
    ramp_rate: str
    jitter_s: str


@dataclass(frozen=True, kw_only=True)
class ReleaseArgs(ScriptArgs):
    SCRIPT = "account/release.lua"
    slots: str = key()
    account: str = key()
    lines: Sequence[str] = key()
    deferred: str = key()
    queued: str = key()
    job_id: str
    job_key_prefix: str
    now_s: str
    max_concurrency: int
    expiry_s: str
    predictive: str
    ramp_rate: str
    jitter_s: str


@dataclass(frozen=True, kw_only=True)
class AddWaiterArgs(ScriptArgs):
    SCRIPT = "account/add_waiter.lua"
    deferred: str = key()
    queued: str = key()
    account_keys: Sequence[str] = key()
    job_id: str
    rank: str
    job_key_prefix: str
    now_s: str
    expiry_s: str
    family: int
    predictive: str
    jitter_s: str
    fallback_s: str
    tenant_line: str
    tenant_score: str
    account_args: Sequence[Arg]


@dataclass(frozen=True, kw_only=True)
class CoolArgs(ScriptArgs):
    SCRIPT = "account/cool.lua"
    account: str = key()
    until_s: str
    reason: str
    jitter_s: str
    family: str


@dataclass(frozen=True, kw_only=True)
class SetStateArgs(ScriptArgs):
    SCRIPT = "account/set_state.lua"
    account: str = key()
    state: str
    warn_window: str


@dataclass(frozen=True, kw_only=True)
class BackoffArgs(ScriptArgs):
    SCRIPT = "account/backoff.lua"
    account: str = key()
    now_s: str
    base_s: str
    cap_s: str
    reason: str
    jitter_s: str


@dataclass(frozen=True, kw_only=True)
class RecordLimitsArgs(ScriptArgs):
    SCRIPT = "account/record_limits.lua"
    account: str = key()
    rq_rem: str
    rq_reset: str
    rq_lim: str
    tk_rem: str
    tk_reset: str
    tk_lim: str
    tk_est: str
    success: str


@dataclass(frozen=True, kw_only=True)
class RecordUtilArgs(ScriptArgs):
    SCRIPT = "account/record_util.lua"
    account: str = key()
    jitter_s: str
    windows: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class AcquireArgs(ScriptArgs):
    SCRIPT = "account/acquire.lua"
    slots: str = key()
    account: str = key()
    lines: Sequence[str] = key()
    job_id: str
    max_concurrency: int
    expiry_s: str
    now_s: str
    rank: str
    job_key_prefix: str
    family: int
    predictive: str
    ramp_rate: str
    jitter_s: str
    may_hold: str
