"""The environment a run's CLI starts with, and `redact` to keep secrets out of text we store.

The SDK starts the CLI with `{**os.environ, **options.env}`, so everything secret the worker holds must be blanked
here explicitly: another account's token, the Redis URL (with its password), an API key that would take precedence
over an OAuth token and bill elsewhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings

#: Variables the CLI reads credentials from; blanked unless they carry this run's own token.
CREDENTIAL_VARS: tuple[str, ...] = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

#: Names the runner sets for the CLI (not secret): tests and the engine find a job's processes by CLAUDEQ_JOB_ID.
JOB_ID_VAR = "CLAUDEQ_JOB_ID"
#: Unique per run (job, attempt, nonce): the runner sweeps the processes of its own run by it, tool subprocesses
#: included (they inherit the CLI's environment), without touching another worker's run of the same job.
RUN_ID_VAR = "CLAUDEQ_RUN_ID"
CLI_BIN_VAR = "CLAUDEQ_CLAUDE_BIN"
_OWN_VARS = frozenset({JOB_ID_VAR, RUN_ID_VAR, CLI_BIN_VAR})

_TOKEN_SHAPE = re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}")
_MIN_SECRET_LEN = 6  # shorter "secrets" would redact ordinary words
_known_secrets: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Add a secret value that `redact` must remove from now on."""
    if value and len(value.strip()) >= _MIN_SECRET_LEN:
        _known_secrets.add(value.strip())


def remember_settings_secrets(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """Learn every secret the settings point at: account tokens that can be read, secret env values, Redis password."""
    env = os.environ if environ is None else environ
    for account in settings.accounts.accounts:
        try:
            remember_secret(account.read_token())
        except Exception:  # a missing token is a problem for the run that needs it, not for redaction
            continue
    for name in [*settings.secret_env, *settings.accounts.secret_env_vars(), *CREDENTIAL_VARS]:
        remember_secret(env.get(name))
    remember_secret(_password(settings.redis_url))
    remember_secret(_password(env.get("CLAUDEQ_REDIS_URL", "")))


def _password(url: str) -> str | None:
    """The password of a Redis URL, in its userinfo or as a `password=` query parameter."""
    parts = urlsplit(url)
    if parts.password:
        return parts.password
    for key, value in parse_qsl(parts.query):
        if key.lower() == "password" and value:
            return value
    return None


def redact(text: str | None, extra: Iterable[str] = ()) -> str:
    """`text` with every known secret and anything shaped like an Anthropic token replaced by `***`."""
    if not text:
        return text or ""
    for secret in sorted(
        {*_known_secrets, *(s for s in extra if s and len(s) >= _MIN_SECRET_LEN)}, key=len, reverse=True
    ):
        text = text.replace(secret, "***")
    return _TOKEN_SHAPE.sub("sk-ant-***", text)


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
