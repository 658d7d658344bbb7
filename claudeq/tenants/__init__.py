"""Tenants: a tenant's runs in flight, its waiters, and the spend of tenants and accounts per calendar window
(`TenantStore`), and the Lua scripts that admit and settle them. The public face of the package: import from here,
never from its `_` modules (docs/architecture.md#who-imports-whom).

- `_store.py`: `TenantStore`, through which the worker's AccountManager admits runs and `claudeq tenants` and the
  exporter read;
- `_scripts.py`: the tenant scripts with their arguments; here as `scripts`, its names also one by one.
"""

from __future__ import annotations

from . import _scripts as scripts
from ._scripts import (
    ADVANCE,
    BALANCE,
    RELEASE,
    RESERVE,
    SETTLE,
    TAG,
    WAIT,
    AdvanceArgs,
    BalanceArgs,
    ReleaseArgs,
    ReserveArgs,
    SettleArgs,
    TagArgs,
    WaitArgs,
)
from ._store import (
    BALANCE_BOUND_S,
    BALANCE_DEADBAND,
    BALANCE_REPAY_S,
    DAY_S,
    HOUR_S,
    REPAY_FIELD,
    SPEND_TTL_S,
    Admission,
    Admitted,
    AtMax,
    OverBudget,
    Reserved,
    Spend,
    TenantStore,
    TenantUsage,
    Window,
    caught_up,
    day_hour_fields,
    day_start_hour,
    effective_cap,
    hour_field,
    turn_field,
    window_end,
)

__all__ = [
    "ADVANCE",
    "BALANCE",
    "BALANCE_BOUND_S",
    "BALANCE_DEADBAND",
    "BALANCE_REPAY_S",
    "DAY_S",
    "HOUR_S",
    "RELEASE",
    "REPAY_FIELD",
    "RESERVE",
    "SETTLE",
    "SPEND_TTL_S",
    "TAG",
    "WAIT",
    "Admission",
    "Admitted",
    "AdvanceArgs",
    "AtMax",
    "BalanceArgs",
    "OverBudget",
    "ReleaseArgs",
    "ReserveArgs",
    "Reserved",
    "SettleArgs",
    "Spend",
    "TagArgs",
    "TenantStore",
    "TenantUsage",
    "WaitArgs",
    "Window",
    "caught_up",
    "day_hour_fields",
    "day_start_hour",
    "effective_cap",
    "hour_field",
    "scripts",
    "turn_field",
    "window_end",
]
