"""The test helper that starts worker processes never leaves one behind, even when it does not get ready."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from tests.conftest import make_settings
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount, start_worker, write_accounts_toml

pytestmark = pytest.mark.integration


def _alive_with(marker: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_worker_that_never_gets_ready_is_stopped(tmp_path: Path, unique: str) -> None:
    accounts = [SimAccount("a")]
    accounts_file = write_accounts_toml(tmp_path / "accounts.toml", accounts, "http://127.0.0.1:9")
    # Nothing listens on port 1: Celery keeps retrying the broker and the worker never gets ready.
    settings = make_settings("redis://127.0.0.1:1/0", unique, accounts_file=accounts_file)
    worker_id = f"never-ready-{unique}"
    with pytest.raises((AssertionError, redis.RedisError)):
        start_worker(settings, accounts, tmp_path, worker_id=worker_id, ready_timeout=5)
    marker = f"CLAUDEQ_WORKER_ID={worker_id}".encode()
    run_until(lambda: not _alive_with(marker), 15, what="the unready worker gone")
