"""A worker runtime in the test's own process, as `claudeq-worker` builds it (build_runtime), with one account of
its own; its keys are deleted when it stops."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from claudeq.worker.app import WorkerRuntime, build_runtime
from tests.conftest import make_settings
from tests.support.worker_proc import SimAccount, write_accounts_toml


@contextmanager
def engine_runtime(
    redis_url: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    worker_id: str,
    max_concurrency: int,
    env: dict[str, str] | None = None,
) -> Iterator[WorkerRuntime]:
    """The runtime of a worker with concurrency 2 and account `acct-a` (`max_concurrency` slots), its engine loop
    started; `env` is set for the build (e.g. the fake runner)."""
    account = SimAccount("acct-a", max_concurrency=max_concurrency)
    monkeypatch.setenv(account.token_env, account.token_value)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    accounts_file = write_accounts_toml(tmp_path / "accounts.toml", [account], "http://127.0.0.1:9")
    settings = make_settings(redis_url, unique, concurrency=2, accounts_file=accounts_file)
    rt = build_runtime(settings, worker_id=worker_id)
    rt.engine.start()
    try:
        yield rt
    finally:
        rt.engine.stop()
        for key in rt.engine.store.redis.scan_iter(match=f"{settings.key_prefix}*", count=1000):
            rt.engine.store.redis.delete(key)
        rt.engine.store.redis.close()
