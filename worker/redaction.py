"""`redact`: the secrets this worker process knows of (account tokens, tenants' webhook secrets and MCP tokens, the web
token, the webhook secret, secret environment values, the Redis and archive passwords) and anything shaped like an
Anthropic token, kept out of every text the worker stores or logs.

A module of the worker's root: every package may import it; it imports nothing of the worker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit

from ..config.settings import Settings

#: Variables the CLI reads credentials from; blanked unless they carry this run's own token.
CREDENTIAL_VARS: tuple[str, ...] = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

_TOKEN_SHAPE = re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}")
#: The CLI's advice after an API error names the host of its ANTHROPIC_BASE_URL: the worker's loopback pass-through
#: (or an account's gateway), which is nobody's business in a job's text.
_GATEWAY_ADVICE = re.compile(r"check your inference gateway \([^)]*\)")
_MIN_SECRET_LEN = 6  # shorter "secrets" would redact ordinary words
_known_secrets: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Add a secret value that `redact` must remove from now on."""
    if value and len(value.strip()) >= _MIN_SECRET_LEN:
        _known_secrets.add(value.strip())


def secret_env_names(settings: Settings) -> set[str]:
    """Every environment variable the settings or the tenants file name as holding a secret: accounts' tokens,
    `CLAUDEQ_SECRET_ENV`, tenants' `webhook_secret_env` and `mcp_token_env`."""
    names = set(settings.secret_env) | settings.accounts.secret_env_vars()
    try:
        tenants = settings.tenants.tenants
    except Exception:  # a broken tenants file fails the worker's start elsewhere, saying why
        tenants = []
    for tenant in tenants:
        names |= {name for name in (tenant.webhook_secret_env, tenant.mcp_token_env) if name}
    return names


def remember_settings_secrets(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """Learn every secret the settings point at (at worker start): account tokens that can be read, the values of
    every variable `secret_env_names` gives, the web token, the webhook secret, the Redis and archive passwords."""
    env = os.environ if environ is None else environ
    for account in settings.accounts.accounts:
        try:
            remember_secret(account.read_token())
        except Exception:  # a missing token is a problem for the run that needs it, not for redaction
            continue
    for name in [*secret_env_names(settings), *CREDENTIAL_VARS, "CLAUDEQ_WEB_TOKEN", "CLAUDEQ_WEBHOOK_SECRET"]:
        remember_secret(env.get(name))
    for value in (settings.web_token, settings.webhook_secret):
        remember_secret(value.get_secret_value() if value is not None else None)
    for url in (settings.redis_url, env.get("CLAUDEQ_REDIS_URL", ""), settings.archive_url or ""):
        remember_secret(_password(url))
    remember_secret(_password(env.get("CLAUDEQ_ARCHIVE_URL", "")))


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
    """`text` with every known secret and anything shaped like an Anthropic token replaced by `***`, and without the
    address of the CLI's model service (the worker's pass-through)."""
    if not text:
        return text or ""
    for secret in sorted(
        {*_known_secrets, *(s for s in extra if s and len(s) >= _MIN_SECRET_LEN)}, key=len, reverse=True
    ):
        text = text.replace(secret, "***")
    text = _GATEWAY_ADVICE.sub("check the fleet's model service (the worker's logs)", text)
    return _TOKEN_SHAPE.sub("sk-ant-***", text)
