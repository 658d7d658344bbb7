"""`redact`: the secrets this worker process knows of (account tokens, secret environment values, the Redis password)
and anything shaped like an Anthropic token, kept out of every text the worker stores or logs.

A module of the worker's root: every package may import it; it imports nothing of the worker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit

from claudeq.config.settings import Settings

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
