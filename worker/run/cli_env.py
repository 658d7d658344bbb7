"""The environment a run's CLI starts with (secrets are kept out of text we store by claudeq.worker.redaction).

The SDK starts the CLI with `{**os.environ, **options.env}`, so everything secret the worker holds must be blanked
here explicitly: another account's token, the Redis URL (with its password), an API key that would take precedence
over an OAuth token and bill elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.worker.redaction import CREDENTIAL_VARS, remember_secret

#: Names the runner sets for the CLI (not secret): tests and the engine find a job's processes by CLAUDEQ_JOB_ID.
JOB_ID_VAR = "CLAUDEQ_JOB_ID"
#: Unique per run (job, attempt, nonce): the runner sweeps the processes of its own run by it, tool subprocesses
#: included (they inherit the CLI's environment), without touching another worker's run of the same job.
RUN_ID_VAR = "CLAUDEQ_RUN_ID"
CLI_BIN_VAR = "CLAUDEQ_CLAUDE_BIN"
_OWN_VARS = frozenset({JOB_ID_VAR, RUN_ID_VAR, CLI_BIN_VAR})


def secret_vars(account: AccountConfig, settings: Settings, environ: Mapping[str, str]) -> set[str]:
    """Every variable the CLI of a run on `account` must see blank."""
    names = set(CREDENTIAL_VARS) | settings.accounts.secret_env_vars() | set(settings.secret_env)
    # The CLI needs none of the worker's own configuration, and CLAUDEQ_REDIS_URL may hold a password.
    names |= {name for name in environ if name.startswith("CLAUDEQ_")}
    names.add("CLAUDEQ_REDIS_URL")
    return names - _OWN_VARS


def build_env(
    account: AccountConfig,
    settings: Settings,
    *,
    token: str,
    job_id: str,
    config_dir: Path | None,
    cli_bin: str | None = None,
    environ: Mapping[str, str] | None = None,
    run_id: str | None = None,
    passthrough_url: str | None = None,
) -> dict[str, str]:
    """`ClaudeAgentOptions.env` for one run: this account's token, other secrets blanked, per-run config dir.

    With `passthrough_url` (the worker's pass-through), `token` is the run's stand-in credential: the CLI talks to
    the pass-through, which puts the real token on the upstream request, and loopback never goes through a proxy.
    """
    env_in = os.environ if environ is None else environ
    if passthrough_url is None:
        remember_secret(token)  # a stand-in needs no remembering: it is token-shaped, and dies with the run
    env = dict.fromkeys(sorted(secret_vars(account, settings, env_in)), "")
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
    env[JOB_ID_VAR] = job_id
    if run_id is not None:
        env[RUN_ID_VAR] = run_id
    if cli_bin is not None:
        env[CLI_BIN_VAR] = cli_bin
    return env
