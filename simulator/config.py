"""Simulator configuration: typed pydantic models, loaded from TOML or built from a dict.

Example TOML::

    seed = 7
    [faults]
    p_529 = 0.05
    [latency]
    ttft_s = 0.2
    tokens_per_s = 200
    [latency.models."claude-opus-5-5"]
    tokens_per_s = 60
    [[accounts]]
    name = "team-a"
    token = "sk-ant-oat01-team-a"
    kind = "oauth"
    [[accounts.windows]]
    family = "5h"
    length_s = 60
    requests = 10
    warn_at = 0.8
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from .usage import MIN_CACHEABLE_TOKENS

WindowFamily = Literal["5h", "7d", "7d_oi", "overage", "7d_opus", "7d_sonnet"]
AccountKind = Literal["oauth", "api_key"]


class _Strict(BaseModel):
    # A typo in a config file should fail loudly, not be ignored; inf and nan are never meant.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


DAY_S = 86400.0
MAX_WAIT_S = DAY_S  # longest stall or time to first token
MAX_WINDOW_S = 366 * DAY_S  # longest rate-limit window


class FaultConfig(_Strict):
    """Random faults injected into main (non-title) requests, drawn from the seeded RNG."""

    p_529: float = Field(0.0, ge=0, le=1, description="Probability of a 529 overloaded_error.")
    p_500: float = Field(0.0, ge=0, le=1, description="Probability of a 500 api_error.")
    p_stall: float = Field(0.0, ge=0, le=1, description="Probability of a stall after message_start.")
    stall_s: float = Field(30.0, ge=0, le=MAX_WAIT_S, description="Length of an injected stall.")
    p_drop: float = Field(0.0, ge=0, le=1, description="Probability of dropping the connection mid-stream.")

    @model_validator(mode="after")
    def _error_probabilities_sum(self) -> FaultConfig:
        if self.p_529 + self.p_500 > 1:
            raise ValueError("faults: p_529 + p_500 must not exceed 1")
        return self


class ModelLatency(_Strict):
    """Latency override for one model id; unset fields fall back to the default."""

    ttft_s: float | None = Field(
        None, ge=0, le=MAX_WAIT_S, description="Seconds from message_start to the first content."
    )
    tokens_per_s: float | None = Field(None, ge=0, description="Output speed; 0 means instant.")


class LatencyConfig(_Strict):
    """Default latency model, with per-model overrides (accounts may override both)."""

    ttft_s: float = Field(0.0, ge=0, le=MAX_WAIT_S, description="Seconds from message_start to the first content.")
    tokens_per_s: float = Field(0.0, ge=0, description="Output speed; 0 means instant.")
    models: dict[str, ModelLatency] = Field(default_factory=dict, description="Overrides keyed by model id.")


class WindowConfig(_Strict):
    """One rate-limit window of an account.

    A window of any length is reported to the CLI under one of the families it knows (`5h`, `7d`, `7d_oi`,
    `overage`) with its own reset time, so a 60 s window can stand in for the 5-hour one. The model-family weekly
    windows (`7d_opus`, `7d_sonnet`) count and refuse only requests for a model of that family.
    """

    family: WindowFamily = Field("5h", description="Header family the window is reported under.")
    length_s: float = Field(
        18000.0, gt=0, le=MAX_WINDOW_S, description="Window length; it starts at its first request."
    )
    requests: int | None = Field(None, ge=0, description="Requests allowed per window (None: unlimited).")
    tokens: int | None = Field(None, ge=0, description="Tokens (all four kinds) per window (None: unlimited).")
    warn_at: float | None = Field(None, gt=0, le=1, description="Utilization at which answers warn.")
    used_requests: int = Field(0, ge=0, description="Requests already used when the first window starts.")
    used_tokens: int = Field(0, ge=0, description="Tokens already used when the first window starts.")


class AccountConfig(_Strict):
    """A simulated account: the token that selects it, its kind and its windows."""

    name: str = Field(min_length=1, description="Name shown in stats and logs (never the token).")
    token: SecretStr = Field(description="Bearer token (OAuth) or x-api-key value that selects the account.")
    kind: AccountKind = Field("oauth", description="oauth: unified rate-limit headers; api_key: plain 429s.")
    auth_fail: bool = Field(False, description="Answer every request with 401 (a revoked credential).")
    ttft_s: float | None = Field(None, ge=0, le=MAX_WAIT_S, description="Overrides the latency model for this account.")
    tokens_per_s: float | None = Field(None, ge=0, description="Overrides the latency model for this account.")
    windows: list[WindowConfig] = Field(default_factory=list, description="Rate-limit windows.")

    @model_validator(mode="after")
    def _one_window_per_family(self) -> AccountConfig:
        families = [w.family for w in self.windows]
        if len(families) != len(set(families)):
            raise ValueError(f"account {self.name!r}: at most one window per family (headers are per family)")
        return self


class SimConfig(_Strict):
    """Everything the simulator can be configured with."""

    seed: int = Field(0, description="Seed of the fault RNG, for reproducible runs.")
    faults: FaultConfig = Field(default_factory=FaultConfig)
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    accounts: list[AccountConfig] = Field(
        default_factory=list, description="Empty: any token is accepted as its own generous account."
    )
    cache_ttl_s: float | None = Field(
        None,
        gt=0,
        le=MAX_WINDOW_S,
        description="Replaces the TTL every cache breakpoint asks for (5 minutes or one hour), so a bench of cache "
        "reuse runs in minutes with the same ratios; unset: the TTLs the requests ask for.",
    )
    cache_min_tokens: int = Field(
        MIN_CACHEABLE_TOKENS,
        ge=0,
        le=1_000_000,
        description="The shortest prefix a breakpoint caches (the API's minimum cacheable length: 1,024 tokens on "
        "the Sonnet models, more on some others); a shorter one is plain input.",
    )
    request_log_size: int = Field(
        2000, ge=0, le=100_000, description="Entries kept by GET /_sim/requests and by GET /_sim/wire."
    )

    @model_validator(mode="after")
    def _unique_accounts(self) -> SimConfig:
        names = [a.name for a in self.accounts]
        if len(names) != len(set(names)):
            raise ValueError("accounts: names must be unique")
        tokens = [a.token.get_secret_value() for a in self.accounts]
        if len(tokens) != len(set(tokens)):
            # Not naming the token: errors are logged and echoed.
            raise ValueError("accounts: two accounts share a token")
        return self


def coerce_config(config: SimConfig | dict[str, Any] | None) -> SimConfig:
    """Accept a SimConfig, a plain dict (as in TOML or JSON) or None (defaults)."""
    if config is None:
        return SimConfig()
    if isinstance(config, SimConfig):
        return config
    return SimConfig.model_validate(config)


def load_config(path: Path | str) -> SimConfig:
    """Read a TOML file into a validated SimConfig."""
    with Path(path).open("rb") as f:
        return SimConfig.model_validate(tomllib.load(f))


def merge_config(current: SimConfig, changes: dict[str, Any]) -> SimConfig:
    """Apply a run-time change: each top-level key given replaces that section (`faults`, `accounts`, …)."""
    data = current.model_dump()
    # model_dump keeps SecretStr objects; unwrap them so validation sees plain strings again.
    for account in data["accounts"]:
        account["token"] = account["token"].get_secret_value()
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return SimConfig.model_validate(data)


def redacted(config: SimConfig) -> dict[str, Any]:
    """The config as JSON-able data with every token masked."""
    return config.model_dump(mode="json")
