"""Chaos fixtures: a private Redis with an append-only file (as docker-compose.yml runs it), which tests may
restart, and the e2e fixtures (simulator, accounts file, workers) bound to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import accounts, accounts_file, settings, simulator, workers  # noqa: F401 (fixtures)
from tests.support.redis_server import PrivateRedis


@pytest.fixture
def aof_redis() -> Iterator[PrivateRedis]:
    """A redis-server of this test's own, AOF on (appendfsync everysec)."""
    server = PrivateRedis(appendonly=True)
    yield server
    server.stop()
