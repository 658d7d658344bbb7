"""End-to-end fixtures: the simulator, an accounts file pointing at it, fast e2e settings, real worker processes.

Every e2e test ends with a secrets check: no account token in any Redis key or value under the test's prefix,
nor in any worker log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.transcripts import decode
from tests.conftest import make_settings
from tests.support.procs import kill_claude
from tests.support.worker_proc import (
    FAST_E2E,
    SimAccount,
    WorkerProcess,
    start_worker,
    stop_all,
    write_accounts_toml,
)

WorkerFactory = Callable[..., WorkerProcess]


@pytest.fixture
def accounts() -> list[SimAccount]:
    """The accounts of this test (override in a test module for other pools)."""
    return [SimAccount("a", max_concurrency=4), SimAccount("b", max_concurrency=4)]


@pytest.fixture
def simulator(accounts: list[SimAccount]) -> Iterator[Any]:
    """An in-thread simulator knowing the test accounts' fake tokens."""
    from claudeq.simulator.testing import SimulatorServer

    config = {"accounts": [{"name": a.name, "token": a.token_value, "kind": a.kind} for a in accounts]}
    with SimulatorServer(config) as sim:
        yield sim


@pytest.fixture
def accounts_file(tmp_path: Path, accounts: list[SimAccount], simulator: Any) -> Path:
    """The workers' accounts TOML: every account on the simulator."""
    return write_accounts_toml(tmp_path / "accounts.toml", accounts, simulator.base_url)


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path) -> Settings:
    """Fast e2e settings: short leases, heartbeats and backoffs; the CLI never retries by itself."""
    return make_settings(redis_url, unique, accounts_file=accounts_file, **FAST_E2E)


@pytest.fixture
def workers(
    settings: Settings, accounts: list[SimAccount], tmp_path: Path, redis_client: redis.Redis
) -> Iterator[WorkerFactory]:
    """Start real `claudeq-worker` processes: `workers(**settings_overrides, extra_env=..., wait=True, prefix=...)`."""
    started: list[WorkerProcess] = []

    def start(
        extra_env: dict[str, str] | None = None, wait: bool = True, prefix: list[str] | None = None, **overrides: Any
    ) -> WorkerProcess:
        cfg = settings.model_copy(update=overrides) if overrides else settings
        worker = start_worker(cfg, accounts, tmp_path, extra_env=extra_env, wait=wait, prefix=prefix)
        started.append(worker)
        return worker

    yield start
    stop_all(started)
    job_ids = [i.decode() for i in redis_client.zrange(f"{settings.key_prefix}jobs", 0, -1)]
    leftover = kill_claude(job_ids)
    assert_no_secrets(redis_client, settings, accounts, [w.log() for w in started])
    assert not leftover, f"claude processes outlived their workers: {leftover}"


def redis_blobs(client: redis.Redis, settings: Settings) -> list[tuple[bytes, bytes]]:
    """(key, blob) for every key and value under the test's prefix and in its queue (every Redis type)."""
    keys = [*client.scan_iter(match=f"{settings.key_prefix}*", count=1000), settings.queue.encode()]
    found: list[tuple[bytes, bytes]] = []
    for key in keys:
        kind = client.type(key).decode()
        blobs: list[bytes] = [key]
        if kind == "string":
            blobs.append(client.get(key) or b"")
        elif kind == "hash":
            blobs += [k + b"=" + v for k, v in client.hgetall(key).items()]
        elif kind == "list":
            items = client.lrange(key, 0, -1)
            blobs += items
            if key.startswith(f"{settings.key_prefix}session:".encode()):
                # Transcripts are stored compressed (claudeq/transcripts/_codec.py): what they hold, entry by entry.
                blobs += [json.dumps(e, ensure_ascii=False).encode() for e in decode(items)]
        elif kind == "set":
            blobs += list(client.smembers(key))
        elif kind == "zset":
            blobs += client.zrange(key, 0, -1)
        elif kind == "stream":
            blobs += [b"".join(k + v for k, v in fields.items()) for _, fields in client.xrange(key)]
        found += [(key, blob) for blob in blobs]
    return found


def assert_no_secrets(
    client: redis.Redis,
    settings: Settings,
    accounts: list[SimAccount],
    logs: list[str],
    extra: Iterable[str] = (),
) -> None:
    """No account token (nor any `extra` secret) in any Redis key or value under the test's prefix, its queue, or
    a worker log."""
    secrets = [a.token_value for a in accounts] + list(extra)
    for key, blob in redis_blobs(client, settings):
        for secret in secrets:
            assert secret.encode() not in blob, f"a secret leaked into Redis key {key!r}"
    for log in logs:
        for secret in secrets:
            assert secret not in log, "a secret leaked into a worker log"
