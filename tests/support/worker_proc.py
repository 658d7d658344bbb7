"""Start and stop real `claudeq-worker` processes for end-to-end tests.

A worker gets its configuration the way production does: CLAUDEQ_* variables (from a `Settings`), an accounts
TOML naming token variables, and the fake tokens themselves in its environment. Its stdout and stderr go to a log
file the test can read (and scan for secrets).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from tests.support.procs import descendants, run_until
from tests.support.tree import ROOT, tree_env

#: Variables a worker must not inherit from the test process (they would change its configuration or leak).
_SCRUB_PREFIXES = ("CLAUDEQ_", "ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR")


#: Settings that keep end-to-end tests fast: short leases, heartbeats and backoffs; the CLI never retries itself.
FAST_E2E: dict[str, Any] = {
    "lease_ttl_s": 3,
    "heartbeat_s": 1,
    "loop_interval_s": 0.5,
    "retry_base_s": 0.3,
    "retry_max_s": 1.0,
    "retry_in_place_max_s": 3.0,
    "cli_max_retries": 0,
    "shutdown_grace_s": 5,
    "unclaimed_resend_s": 60,
    "first_byte_timeout_s": 30,
    "idle_timeout_s": 30,
    "deadline_s": 120,
    "concurrency": 2,
    # Cold runs: these tests find a job's CLI by the job id in its environment, which a warm CLI cannot carry (it
    # serves many jobs). tests/e2e/test_warm.py turns them on.
    "warm_clients": 0,
}


@dataclass(frozen=True)
class SimAccount:
    """An account as both the worker pool and the simulator see it."""

    name: str
    kind: str = "oauth"
    max_concurrency: int = 2
    token: str = ""
    toml: str = ""  # more lines of the account's table in the accounts file (e.g. ceilings)

    @property
    def token_value(self) -> str:
        """The fake token (never a real one)."""
        prefix = "sk-ant-oat01-test-" if self.kind == "oauth" else "sk-ant-api03-test-"
        return self.token or f"{prefix}{self.name}"

    @property
    def token_env(self) -> str:
        """The variable the worker reads the token from."""
        return f"CQT_TOKEN_{self.name.upper().replace('-', '_')}"


def write_accounts_toml(path: Path, accounts: list[SimAccount], base_url: str) -> Path:
    """The worker's accounts file: every account pointing at `base_url` (the simulator)."""
    lines: list[str] = []
    for account in accounts:
        lines += [
            "[[accounts]]",
            f'name = "{account.name}"',
            f'kind = "{account.kind}"',
            f'token_env = "{account.token_env}"',
            f"max_concurrency = {account.max_concurrency}",
            f'base_url = "{base_url}"',
            *([account.toml] if account.toml else []),
            "",
        ]
    path.write_text("\n".join(lines))
    return path


def settings_env(settings: Settings) -> dict[str, str]:
    """CLAUDEQ_* variables that reproduce `settings` in another process."""
    env: dict[str, str] = {}
    data = settings.model_dump(mode="json")
    for name in data:  # a secret setting is dumped masked: the other process needs its value
        secret = getattr(settings, name)
        if isinstance(secret, SecretStr):
            data[name] = secret.get_secret_value()
    for name, value in data.items():
        if value is None:
            continue
        key = f"CLAUDEQ_{name.upper()}"
        env[key] = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return env


def worker_env(settings: Settings, accounts: list[SimAccount], **extra: str) -> dict[str, str]:
    """A clean environment for a worker process: PATH etc., the settings, the fake tokens."""
    env = tree_env({k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)})
    env.update(settings_env(settings))
    for account in accounts:
        env[account.token_env] = account.token_value
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """A running `claudeq-worker`."""

    proc: subprocess.Popen[bytes]
    worker_id: str
    log_path: Path
    settings: Settings
    children_seen: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        """The worker's pid."""
        return self.proc.pid

    def log(self) -> str:
        """Everything the worker wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc.poll() is None

    def heartbeat_fresh(self) -> bool:
        """Whether the worker's heartbeat key exists."""
        client = redis.Redis.from_url(self.settings.redis_url)
        try:
            return bool(client.exists(Keys(self.settings.key_prefix).worker(self.worker_id)))
        finally:
            client.close()

    def wait_ready(self, timeout: float = 30) -> None:
        """Block until the worker's heartbeat appears (it is consuming); fail with its log otherwise."""

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            return self.heartbeat_fresh() and "ready." in self.log()

        run_until(ready, timeout, 0.1, what=f"worker {self.worker_id} ready")

    def descendants(self) -> list[int]:
        """Live descendants of the worker (its CLIs and their children)."""
        return descendants(self.pid) if self.alive() else []

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (graceful shutdown) and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL the worker (its CLIs must die with it)."""
        if self.alive():
            self.proc.kill()
        self.proc.wait(10)


def start_worker(
    settings: Settings,
    accounts: list[SimAccount],
    log_dir: Path,
    *,
    worker_id: str | None = None,
    extra_env: dict[str, str] | None = None,
    args: list[str] | None = None,
    wait: bool = True,
    ready_timeout: float = 30,
    prefix: list[str] | None = None,
) -> WorkerProcess:
    """Start `claudeq-worker` with `settings` (accounts_file must be set) and wait until it is consuming. `prefix`
    goes before the command (e.g. a `setpriv` that starts it under another uid; it must exec the worker)."""
    worker_id = worker_id or f"test-worker-{uuid.uuid4().hex[:6]}"
    env = worker_env(settings, accounts, CLAUDEQ_WORKER_ID=worker_id, **(extra_env or {}))
    log_path = log_dir / f"{worker_id}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "claudeq.worker", *(args or [])],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
        )
    worker = WorkerProcess(proc, worker_id, log_path, settings)
    if wait:
        try:
            worker.wait_ready(ready_timeout)
        except BaseException:
            worker.kill()  # nobody else knows this process: never leave it running
            raise
    return worker


def stop_all(workers: list[WorkerProcess], timeout: float = 30) -> None:
    """Stop every worker still running (teardown)."""
    for worker in workers:
        if worker.alive():
            worker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in workers:
        try:
            worker.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait(10)


__all__ = ["SimAccount", "WorkerProcess", "start_worker", "stop_all", "worker_env", "write_accounts_toml"]
