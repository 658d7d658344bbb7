"""The environment a run's CLI starts with: an allow-list (secrets are kept out of text we store by
claudeq.worker.redaction).

The SDK starts the CLI with `{**os.environ, **options.env}`; the wrapper that starts the CLI
(`claude-pdeathsig.sh`) keeps only the variables `ENV_KEEP_VAR` names: what this module passes on from the worker's
environment (`PASSED_VARS`, the locale, what the operator lists in `CLAUDEQ_CLI_ENV`), what claudeq sets, and the few
the SDK sets itself. Every secret the worker holds is also blanked in `options.env`, so a wrapper that did not filter
would still pass none (docs/architecture.md#security-model).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...config.account_pool import AccountConfig
from ...config.settings import Settings
from ..redaction import CREDENTIAL_VARS, remember_secret, secret_env_names

#: Names the runner sets for the CLI (not secret): tests and the engine find a job's processes by CLAUDEQ_JOB_ID.
JOB_ID_VAR = "CLAUDEQ_JOB_ID"
#: Unique per run (job, attempt, nonce): the runner sweeps the processes of its own run by it, tool subprocesses
#: included (they inherit the CLI's environment), without touching another worker's run of the same job.
RUN_ID_VAR = "CLAUDEQ_RUN_ID"
CLI_BIN_VAR = "CLAUDEQ_CLAUDE_BIN"
#: The names the wrapper keeps (space-separated); it starts the CLI with those alone.
ENV_KEEP_VAR = "CLAUDEQ_ENV_KEEP"
_OWN_VARS = frozenset({JOB_ID_VAR, RUN_ID_VAR, CLI_BIN_VAR})

#: The worker's variables every CLI gets as they are: the search path, home, time zone, temp dir, CA bundles.
PASSED_VARS: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)
#: Variables the SDK sets on the CLI's environment itself (claude_agent_sdk's subprocess transport).
SDK_VARS: tuple[str, ...] = (
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_AGENT_SDK_CLIENT_APP",
    "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP",
    "CLAUDE_CODE_SDK_READS_SESSION_STATE",
    "CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING",
    "TRACEPARENT",
    "TRACESTATE",
    "PWD",
)


def secret_vars(account: AccountConfig, settings: Settings, environ: Mapping[str, str]) -> set[str]:
    """Every variable the CLI of a run on `account` must see blank."""
    names = set(CREDENTIAL_VARS) | secret_env_names(settings)
    # The CLI needs none of the worker's own configuration, and CLAUDEQ_REDIS_URL may hold a password.
    names |= {name for name in environ if name.startswith("CLAUDEQ_")}
    names.add("CLAUDEQ_REDIS_URL")
    return names - _OWN_VARS


def passed_vars(settings: Settings, environ: Mapping[str, str], secrets: set[str]) -> dict[str, str]:
    """What the CLI gets of the worker's own environment: `PASSED_VARS`, the locale (`LC_*`) and the operator's
    `CLAUDEQ_CLI_ENV`, never a secret."""
    wanted = {*PASSED_VARS, *settings.cli_env}
    return {
        name: value
        for name, value in environ.items()
        if (name in wanted or name.startswith("LC_")) and name not in secrets and value
    }


@dataclass(frozen=True)
class Credential:
    """What a run's CLI authenticates with: the account's own token, or with the worker's pass-through
    (`passthrough_url`) the run's stand-in — the CLI talks to the pass-through, which puts the real token on the
    upstream request."""

    token: str
    passthrough_url: str | None = None


@dataclass(frozen=True)
class RunTags:
    """What claudeq names a run's processes by in their environment: the job (`JOB_ID_VAR`), the run (`RUN_ID_VAR`:
    the runner sweeps its own run's processes by it) and the CLI the wrapper starts (`CLI_BIN_VAR`). A warm CLI,
    which outlives its jobs, is tagged with its own id for both."""

    job_id: str
    run_id: str | None = None
    cli_bin: str | None = None


def build_env(
    account: AccountConfig,
    settings: Settings,
    *,
    credential: Credential,
    tags: RunTags,
    config_dir: Path | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """`ClaudeAgentOptions.env` for one run: the allow-listed environment, this account's token, every other secret
    blanked, per-run config dir. `sealed` adds the list the wrapper keeps, once everything is set.

    With the pass-through (`credential.passthrough_url`) the token is the run's stand-in, and loopback never goes
    through a proxy.
    """
    env_in = os.environ if environ is None else environ
    token, passthrough_url = credential.token, credential.passthrough_url
    if passthrough_url is None:
        remember_secret(token)  # a stand-in needs no remembering: it is token-shaped, and dies with the run
    secrets = secret_vars(account, settings, env_in)
    env = dict.fromkeys(sorted(secrets), "")
    env.update(passed_vars(settings, env_in, secrets))
    env[account.token_env_var] = token
    # Concurrent CLIs sharing one config dir corrupt its .claude.json; an interactive login's dir is used as is.
    chosen = account.config_dir or config_dir
    if chosen is not None:
        env["CLAUDE_CONFIG_DIR"] = str(chosen)
    if passthrough_url is not None:
        env["ANTHROPIC_BASE_URL"] = passthrough_url
        no_proxy = [p for p in env_in.get("NO_PROXY", env_in.get("no_proxy", "")).split(",") if p.strip()]
        env["NO_PROXY"] = env["no_proxy"] = ",".join([*no_proxy, "127.0.0.1", "localhost"])
    elif account.base_url:
        env["ANTHROPIC_BASE_URL"] = account.base_url
    env["CLAUDE_CODE_MAX_RETRIES"] = str(settings.cli_max_retries)
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    env[JOB_ID_VAR] = tags.job_id
    if tags.run_id is not None:
        env[RUN_ID_VAR] = tags.run_id
    if tags.cli_bin is not None:
        env[CLI_BIN_VAR] = tags.cli_bin
    return env


def sealed(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the list of names the wrapper keeps: those set (not blank) in it, and the SDK's own."""
    keep = sorted({*(name for name, value in env.items() if value and name != ENV_KEEP_VAR), *SDK_VARS})
    return {**env, ENV_KEEP_VAR: " ".join(keep)}


def exporter_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's OTLP exporter settings (`OTEL_EXPORTER_OTLP_*`), for a traced run's CLI to send its spans where
    the worker sends its own (docs/tracing.md)."""
    env_in = os.environ if environ is None else environ
    return {name: value for name, value in env_in.items() if name.startswith("OTEL_EXPORTER_OTLP_") and value}
