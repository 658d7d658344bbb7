"""`claudeq web` / `claudeq api` as their own processes (the commands a user runs), for tests that talk HTTP to them."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from claudeq.config.settings import Settings
from tests.support.worker_proc import settings_env, worker_env

#: The line `claudeq web` / `claudeq api` print at start when no token is configured: the URL that logs in.
TOKEN_URL = re.compile(r"(?:[?&]token=|Authorization: Bearer )([A-Za-z0-9_\-]{20,})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """A running server: its base URL, its log so far, and the token it printed (None when one is configured)."""

    base: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def printed_token(self) -> str | None:
        found = TOKEN_URL.search(self.log())
        return found[1] if found else None


@contextmanager
def serve_command(
    command: str, settings: Settings, tmp_path: Path, extra_env: dict[str, str] | None = None, *args: str
) -> Iterator[Served]:
    """Run `claudeq <command> --port P` on loopback until the block ends; waits until it answers."""
    port = free_port()
    log_path = tmp_path / f"{command}-{port}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", command, "--port", str(port), *args],
        env={**worker_env(settings, []), **settings_env(settings), **(extra_env or {})},
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    served = Served(f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{served.base}/", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, served.log()
                assert time.monotonic() < deadline, f"claudeq {command} did not listen"
                time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
