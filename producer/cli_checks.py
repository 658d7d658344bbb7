"""What `claudeq config check` reads beyond the settings themselves: the tenants file against the accounts, and the
Redis settings the fleet's guarantees rest on (docs/guarantees.md: AOF on, `noeviction`)."""

from __future__ import annotations

import os
from typing import Any

import redis

from claudeq.errors import ConfigError

from ..config.settings import Settings

#: Redis settings a fleet needs -> (the value it needs, what goes wrong without it).
REDIS_NEEDS: dict[str, tuple[str, str]] = {
    "appendonly": ("yes", "a Redis restart loses every job written since its last snapshot"),
    "maxmemory-policy": ("noeviction", "at its memory limit Redis evicts keys, and an evicted key loses a job"),
}


def redis_warnings(client: redis.Redis) -> tuple[dict[str, str], list[str]]:
    """Redis's own `appendonly` and `maxmemory-policy` -> (what they are, a warning with the fix for each that would
    lose jobs). A Redis refusing CONFIG (a managed service) gets one warning saying what to make sure of."""
    found: dict[str, str] = {}
    warnings: list[str] = []
    for name, (needed, risk) in REDIS_NEEDS.items():
        try:
            answer: Any = client.config_get(name)
        except redis.ResponseError as exc:
            found[name] = "unknown"
            warnings.append(
                f"Redis refuses CONFIG GET {name} ({exc}): make sure it is `{needed}`, else {risk} "
                "(your provider's settings)"
            )
            continue
        value = answer.get(name) if isinstance(answer, dict) else None
        found[name] = str(value) if value is not None else "unknown"
        if value is not None and value != needed:
            warnings.append(
                f"Redis {name} is {value!r}: {risk}; set `{name} {needed}` in redis.conf (or now: "
                f"`redis-cli CONFIG SET {name} {needed}` then `CONFIG REWRITE`)"
            )
    return found, warnings


def tenants_report(settings: Settings, accounts: list[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """The tenants file read and checked -> (its report, problems, warnings): it parses, each tenant's accounts
    exist, each named secret variable is set (values never shown)."""
    if settings.tenants_file is None:
        return {"file": None, "tenants": []}, [], []
    problems: list[str] = []
    warnings: list[str] = []
    try:
        tenants = settings.tenants
    except ConfigError as exc:
        return {"file": str(settings.tenants_file), "tenants": []}, [f"tenants: {exc}"], []
    for tenant in tenants.tenants:
        unknown = [a for a in tenant.accounts or [] if a not in accounts]
        if unknown:
            problems.append(
                f"{settings.tenants_file}: tenants.{tenant.name}.accounts names {', '.join(unknown)}, not an account "
                f"({', '.join(accounts) or 'none configured'})"
            )
        for what, env in (("mcp_token_env", tenant.mcp_token_env), ("webhook_secret_env", tenant.webhook_secret_env)):
            if env and not os.environ.get(env):
                warnings.append(f"{settings.tenants_file}: tenants.{tenant.name}.{what}: {env} is not set here")
    report = {"file": str(settings.tenants_file), "tenants": [t.name for t in tenants.tenants]}
    return report, problems, warnings
