"""The account pool: which Claude accounts the fleet may use, loaded from a TOML file.

A secret never appears here: an account names where its token comes from (`token_env` or `token_file`), and the
token is read only when a run needs it.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from claudeq.errors import ConfigError

from .named import by_name

AccountKind = Literal["oauth", "api_key"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_WINDOW = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class AccountConfig(BaseModel):
    """One Claude account as the operator configured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Unique name; used in metrics labels and Redis keys.")
    kind: AccountKind = Field(description="`oauth` (a subscription token) or `api_key`.")
    token_env: str | None = Field(default=None, description="Environment variable holding the token.")
    token_file: Path | None = Field(default=None, description="File holding the token (e.g. a compose secret).")
    max_concurrency: int = Field(default=1, ge=1, le=1000, description="Runs at once on this account.")
    base_url: str | None = Field(default=None, description="ANTHROPIC_BASE_URL for this account (gateway, simulator).")
    config_dir: Path | None = Field(
        default=None,
        description="Config dir of an interactive login; runs there go one at a time. Usually unset.",
    )
    weight: float = Field(default=1.0, gt=0, description="Relative share of work; higher gets more.")
    models: list[str] = Field(default_factory=list, description="Models this account may run; empty = any.")
    utilization_ceiling: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Take no new run once a window's reported utilization reaches this (headroom for people).",
    )
    ceilings: dict[str, float] = Field(
        default_factory=dict,
        description="Ceiling per window (five_hour, seven_day, seven_day_opus, …); others use utilization_ceiling.",
    )
    ramp_starts_per_s: float = Field(
        default=2.0,
        ge=0,
        description="After a cooldown or reservation ends, at most this many runs start per second (0: no ramp).",
    )
    max_cost_usd_per_hour: float | None = Field(
        default=None, gt=0, description="Spend cap per calendar hour (UTC) of the runs on this account."
    )
    max_cost_usd_per_day: float | None = Field(
        default=None, gt=0, description="Spend cap per calendar day (UTC) of the runs on this account."
    )

    @model_validator(mode="after")
    def _check(self) -> AccountConfig:
        if not _NAME.match(self.name):
            raise ValueError("name must be 1-63 letters, digits, '_', '.', '-' and start with a letter or digit")
        if (self.token_env is None) == (self.token_file is None):
            raise ValueError("set exactly one of token_env or token_file (never the token itself)")
        for window, ceiling in self.ceilings.items():
            if not _WINDOW.match(window):
                raise ValueError(f"ceilings: {window!r} is not a window name (five_hour, seven_day, seven_day_opus, …)")
            if not 0 < ceiling <= 1:
                raise ValueError(f"ceilings.{window} must be above 0 and at most 1")
        if self.config_dir is not None and self.max_concurrency > 1:
            # Concurrent CLIs sharing one config dir corrupt its .claude.json (claude-code #29051, #28829).
            raise ValueError("an account with config_dir runs one job at a time: set max_concurrency = 1")
        return self

    @property
    def token_env_var(self) -> str:
        """The variable the CLI reads this account's token from."""
        return "CLAUDE_CODE_OAUTH_TOKEN" if self.kind == "oauth" else "ANTHROPIC_API_KEY"

    def read_token(self) -> str:
        """Read the secret now; raise ConfigError (without the secret) when it is missing."""
        if self.token_env is not None:
            value = os.environ.get(self.token_env, "").strip()
            if not value:
                raise ConfigError(
                    f"accounts.{self.name}.token_env",
                    f"environment variable {self.token_env} is empty or unset; export the account's token there",
                )
            return value
        assert self.token_file is not None
        try:
            value = self.token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"accounts.{self.name}.token_file", f"cannot read {self.token_file}: {exc.strerror}"
            ) from None
        if not value:
            raise ConfigError(f"accounts.{self.name}.token_file", f"{self.token_file} is empty")
        return value

    @property
    def capped(self) -> bool:
        """Whether the account has a spend cap."""
        return self.max_cost_usd_per_hour is not None or self.max_cost_usd_per_day is not None

    def ceiling(self, window: str) -> float:
        """The utilization at which the account takes no new run on `window` (its family's, else the account's)."""
        return self.ceilings.get(window, self.utilization_ceiling)

    def allows_model(self, model: str | None) -> bool:
        """Whether a job asking for `model` (None = the default) may run on this account."""
        return not self.models or model is None or model in self.models


class AccountPool(BaseModel):
    """All configured accounts, in file order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accounts: list[AccountConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AccountPool:
        seen: set[str] = set()
        for account in self.accounts:
            if account.name in seen:
                raise ValueError(f"account name {account.name!r} is used twice")
            seen.add(account.name)
        return self

    def get(self, name: str) -> AccountConfig | None:
        """The account called `name`, if configured: looked up by name (the engine asks a few times per job, and the
        signals on every response), in an index built once per list of accounts (a copy with other accounts gets
        its own)."""
        return by_name(self, self.accounts).get(name)

    @property
    def names(self) -> list[str]:
        """Account names in file order."""
        return [a.name for a in self.accounts]

    def secret_env_vars(self) -> set[str]:
        """Every environment variable that holds some account's token."""
        return {a.token_env for a in self.accounts if a.token_env}

    @classmethod
    def from_toml(cls, path: Path) -> AccountPool:
        """Load `[[accounts]]` tables from a TOML file; errors name the field and the fix."""
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError("CLAUDEQ_ACCOUNTS_FILE", f"cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("CLAUDEQ_ACCOUNTS_FILE", f"{path} is not valid TOML: {exc}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, object], source: str = "accounts") -> AccountPool:
        """Build a pool from already-parsed data, with the same error messages as the file."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"{source}: {loc}", first["msg"]) from None

    @classmethod
    def from_environment(cls) -> AccountPool:
        """A one-account pool from a token already in the environment, for a quick start without a file."""
        if os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"):
            return cls(accounts=[AccountConfig(name="default", kind="oauth", token_env="CLAUDE_CODE_OAUTH_TOKEN")])
        if os.environ.get("ANTHROPIC_API_KEY"):
            return cls(accounts=[AccountConfig(name="default", kind="api_key", token_env="ANTHROPIC_API_KEY")])
        return cls()
