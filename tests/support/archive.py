"""The transcript archive's stores for tests: SQLite in the test's folder, and the machine's PostgreSQL
(127.0.0.1:5432, database `test`, trust auth; CLAUDEQ_TEST_POSTGRES_URL overrides) — skipped locally when it does
not answer, a failure under CI=true, whose machines run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

POSTGRES_URL = os.environ.get("CLAUDEQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_url() -> str:
    """The test PostgreSQL's URL, once it answers."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        message = f"PostgreSQL at {POSTGRES_URL} does not answer ({type(exc).__name__}: {exc})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        raise pytest.skip.Exception(message) from None
    return POSTGRES_URL


def archive_url(kind: str, folder: Path) -> str:
    """An archive URL of `kind` (`sqlite` or `postgresql`)."""
    return f"sqlite:///{folder / 'archive.db'}" if kind == "sqlite" else postgres_url()
