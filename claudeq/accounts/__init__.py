"""Accounts: what Redis holds about each account (state, cooldown, windows, counters) and its slot semaphore
(`AccountStore`), and the Lua scripts that change them. The public face of the package: import from here, never
from its `_` modules (docs/architecture.md#who-imports-whom).

- `_store.py`: `AccountStore`, which the CLI and the exporter read and the worker's AccountManager writes through;
- `_scripts.py`: the account scripts with their arguments; here as `scripts`, its names also one by one.
"""

from __future__ import annotations

from . import _scripts as scripts
from ._scripts import (
    ACQUIRE,
    ADD_WAITER,
    ADMIT,
    BACKOFF,
    COOL,
    RECORD_LIMITS,
    RECORD_UTIL,
    RELEASE,
    SET_STATE,
    AcquireArgs,
    AddWaiterArgs,
    AdmitArgs,
    BackoffArgs,
    CoolArgs,
    RecordLimitsArgs,
    RecordUtilArgs,
    ReleaseArgs,
    SetStateArgs,
)
from ._store import (
    FAMILIES,
    HISTORY_COUNTERS,
    HISTORY_HOURS,
    HISTORY_TTL_S,
    AccountStore,
    Waiter,
    held,
    model_family,
    parse_state,
    reservations,
    window_family,
)

__all__ = [
    "ACQUIRE",
    "ADD_WAITER",
    "ADMIT",
    "BACKOFF",
    "COOL",
    "FAMILIES",
    "HISTORY_COUNTERS",
    "HISTORY_HOURS",
    "HISTORY_TTL_S",
    "RECORD_LIMITS",
    "RECORD_UTIL",
    "RELEASE",
    "SET_STATE",
    "AccountStore",
    "AcquireArgs",
    "AddWaiterArgs",
    "AdmitArgs",
    "BackoffArgs",
    "CoolArgs",
    "RecordLimitsArgs",
    "RecordUtilArgs",
    "ReleaseArgs",
    "SetStateArgs",
    "Waiter",
    "held",
    "model_family",
    "parse_state",
    "reservations",
    "scripts",
    "window_family",
]
