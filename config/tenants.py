"""Tenants: who shares the fleet, and what each may use (the tenants file, `CLAUDEQ_TENANTS_FILE`).

A tenant is a name on every job (`JobSpec.tenant`, default `default`). The file caps each tenant's runs in flight
fleet-wide, weighs its share of contended slots, caps its spend per calendar hour and day (UTC), and may limit the
accounts, models and tool profiles its jobs use. Without a file every tenant name is accepted and nothing is capped.
A secret never appears here: an MCP bearer token is named by the environment variable that holds it.
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from claudeq.errors import ConfigError

from .approval_rules import MAX_RULES, ApprovalRule
from .named import by_name

#: The tenant of a job that names none.
DEFAULT_TENANT = "default"
#: What a tenant name may look like (it is a metrics label value and part of Redis keys).
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

OnBudget = Literal["wait", "fail"]


class TenantConfig(BaseModel):
    """One tenant as the operator configured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Unique name; the `tenant` jobs give.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Runs in flight fleet-wide; none = no cap.")
    weight: float = Field(default=1.0, gt=0, description="Share of contended slots, relative to other tenants.")
    max_cost_usd_per_hour: float | None = Field(default=None, gt=0, description="Spend cap per calendar hour (UTC).")
    max_cost_usd_per_day: float | None = Field(default=None, gt=0, description="Spend cap per calendar day (UTC).")
    on_budget: OnBudget = Field(default="wait", description="Over a cap: `wait` (deferred) or `fail` the job.")
    accounts: list[str] | None = Field(default=None, description="Accounts its jobs may run on; none = any.")
    models: list[str] | None = Field(default=None, description="Models its jobs may ask for; none = any.")
    tool_profiles: list[str] | None = Field(default=None, description="Tool profiles its jobs may ask for.")
    submit_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Jobs it may submit through the HTTP API per minute; over it, 429 (docs/http-api.md); none = any.",
    )
    callback_queues: list[str] = Field(
        default_factory=list,
        description="Queues of its own Celery app its jobs' `link` / `link_error` may name; empty = no callbacks.",
    )
    mcp_token_env: str | None = Field(
        default=None,
        description="Environment variable holding the bearer token that maps an HTTP MCP caller to this tenant.",
    )
    webhook_url: str | None = Field(
        default=None,
        description="Where its jobs' ends are POSTed when a job names no webhook of its own (on an allowed host).",
    )
    approve_tools: list[str | ApprovalRule] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description="Tool uses of its jobs that wait for a person's approval when a job gives no `approve_tools`.",
    )
    webhook_body: Literal["record", "result"] = Field(default="record", description="What that webhook is sent.")
    webhook_secret_env: str | None = Field(
        default=None,
        description="Environment variable holding the Standard Webhooks secret (`whsec_…`) its webhooks are signed "
        "with; none = the fleet's CLAUDEQ_WEBHOOK_SECRET. Read by the workers, which deliver.",
    )

    @model_validator(mode="after")
    def _check(self) -> TenantConfig:
        if not TENANT_NAME.match(self.name):
            raise ValueError("name must be 1-63 letters, digits, '_', '.', '-' and start with a letter or digit")
        return self

    @property
    def capped(self) -> bool:
        """Whether the tenant has a spend cap."""
        return self.max_cost_usd_per_hour is not None or self.max_cost_usd_per_day is not None

    def webhook_secret(self) -> str | None:
        """The secret its webhooks are signed with (read now), or None when it has none of its own."""
        if self.webhook_secret_env is None:
            return None
        return os.environ.get(self.webhook_secret_env, "").strip() or None

    def mcp_token(self) -> str | None:
        """The bearer token of this tenant's MCP callers (read now), or None when none is configured or set."""
        if self.mcp_token_env is None:
            return None
        return os.environ.get(self.mcp_token_env, "").strip() or None


class Tenants(BaseModel):
    """The tenants file: `[[tenants]]` tables and `allow_unknown`.

    `allow_unknown = false` (the default): a job naming a tenant not in the file is refused at submit.
    `allow_unknown = true`: it is accepted and governed by the `default` tenant's entry (unlimited if none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: list[TenantConfig] = Field(default_factory=list)
    allow_unknown: bool = False
    #: Reserved fair share (docs/architecture.md#fair-share): while more than one tenant is active, a tenant holds at
    #: most its weighted share of the fleet's slots (runs in flight and jobs waiting in the accounts' lines).
    reserve_share: bool = False
    #: A tenant stays active this long (s) after its last job finished, so a tenant submitting one job after another
    #: keeps its share reserved between them.
    share_idle_s: float = Field(default=10.0, ge=0)
    #: False when no file is configured: every name is accepted, nothing is capped.
    configured: bool = True

    @model_validator(mode="after")
    def _unique(self) -> Tenants:
        seen: set[str] = set()
        for tenant in self.tenants:
            if tenant.name in seen:
                raise ValueError(f"tenant name {tenant.name!r} is used twice")
            seen.add(tenant.name)
        return self

    @property
    def names(self) -> list[str]:
        """Configured tenant names in file order."""
        return [t.name for t in self.tenants]

    def get(self, name: str) -> TenantConfig | None:
        """The tenant called `name`, if configured: looked up by name (the engine asks several times per job:
        `governing`, `label`, `known`), in an index built once per list of tenants (a copy with other tenants gets
        its own)."""
        return by_name(self, self.tenants).get(name)

    def known(self, name: str) -> bool:
        """Whether a job may name `name` as its tenant."""
        return not self.configured or self.allow_unknown or self.get(name) is not None

    def governing(self, name: str) -> TenantConfig:
        """The entry whose limits apply to jobs of `name`: its own, else `default`'s, else no limits."""
        return self.get(name) or self.get(DEFAULT_TENANT) or _unlimited()

    @property
    def share_names(self) -> list[str]:
        """The names jobs are indexed under as active (`tenant:{name}:jobs`): every configured tenant, and `default`
        when it governs strangers (`allow_unknown`)."""
        names = self.names
        if self.allow_unknown and DEFAULT_TENANT not in names:
            names.append(DEFAULT_TENANT)
        return names

    def share_cap(self, tenant: TenantConfig, active: Collection[str], slots: int) -> int | None:
        """The most runs `tenant` may hold (in flight and in the accounts' lines) under reserved fair share, or None
        when `reserve_share` is off: max(1, floor(slots x its weight / the active tenants' weights)), `tenant` itself
        counted active. Alone it keeps every slot (`slots`): its backlog still waits in its own line, not the
        accounts', so another tenant that becomes active finds at most `slots` of its jobs ahead of it."""
        if not self.reserve_share or slots <= 0:
            return None
        names = set(active) | {tenant.name}
        total = sum(self.governing(name).weight for name in names if name != tenant.name) + tenant.weight
        return max(1, math.floor(slots * tenant.weight / total + 1e-9))

    def label(self, name: str) -> str:
        """A bounded metrics label: a configured tenant's name (or `default`), anything else `other`."""
        return name if name == DEFAULT_TENANT or self.get(name) is not None else "other"

    def by_token(self, token: str) -> TenantConfig | None:
        """The tenant whose MCP bearer token is `token` (compared in constant time)."""
        import hmac

        for tenant in self.tenants:
            expected = tenant.mcp_token()
            if expected is not None and hmac.compare_digest(expected.encode(), token.encode()):
                return tenant
        return None

    @property
    def token_mapping(self) -> bool:
        """Whether any tenant maps an MCP bearer token (then the HTTP MCP server requires one)."""
        return any(t.mcp_token_env for t in self.tenants)

    @classmethod
    def unconfigured(cls) -> Tenants:
        """No tenants file: every tenant name accepted, no limits."""
        return cls(configured=False)

    @classmethod
    def from_toml(cls, path: Path) -> Tenants:
        """Load the tenants file; errors name the field and the fix."""
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError("CLAUDEQ_TENANTS_FILE", f"cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("CLAUDEQ_TENANTS_FILE", f"{path} is not valid TOML: {exc}") from None
        data.pop("configured", None)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"{path}: {loc}", first["msg"]) from None


@functools.cache
def _unlimited() -> TenantConfig:
    """The limits of a tenant no entry governs: none (one instance: validating a new one per job costs)."""
    return TenantConfig(name=DEFAULT_TENANT)
