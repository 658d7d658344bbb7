"""Running a simulator from tests: in-process (a background thread) or as a separate process."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from .app import create_app, quiet_dropped_streams
from .config import SimConfig
from .service import Simulator

READY_PREFIX = "listening on "
START_TIMEOUT_S = 30.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket (port 0: a free port, read back with getsockname)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def uvicorn_config(app: Any, log_level: str = "warning", configure_logging: bool = False) -> uvicorn.Config:
    """Server settings shared by the thread and the process: no access log, a short graceful shutdown
    (a stalled stream must not hold up the exit)."""
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        log_config=uvicorn.config.LOGGING_CONFIG if configure_logging else None,
    )


class SimulatorServer:
    """A simulator on 127.0.0.1 (a free port) served by uvicorn in a background thread.

    Use as a context manager: `with SimulatorServer({...}) as sim: sim.base_url`.
    """

    def __init__(self, config: SimConfig | dict[str, Any] | None = None, host: str = "127.0.0.1"):
        self.simulator = Simulator(config)
        self.host = host
        self.base_url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None

    def start(self) -> SimulatorServer:
        """Start serving; returns once the server accepts connections."""
        quiet_dropped_streams()
        sock = bind_socket(self.host, 0)
        port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn_config(create_app(self.simulator)))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="claudeq-simulator", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("simulator server did not start")
            time.sleep(0.005)
        self.base_url = f"http://{self.host}:{port}"
        # trust_env=False: a proxy from the environment must not sit between tests and the simulator.
        self._client = httpx.Client(base_url=self.base_url, trust_env=False, timeout=30)
        return self

    def stop(self) -> None:
        """Stop the server (streams still open are cut after a second) and wait for the thread."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _http(self) -> httpx.Client:
        if self._client is None:
            raise RuntimeError("the simulator server is not running")
        return self._client

    def stats(self) -> dict[str, Any]:
        """GET /_sim/stats."""
        response = self._http().get("/_sim/stats")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def requests(self, limit: int | None = None) -> list[dict[str, Any]]:
        """GET /_sim/requests: the request log, oldest first."""
        params = {"limit": str(limit)} if limit else {}
        response = self._http().get("/_sim/requests", params=params)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def wire(self, limit: int | None = None) -> list[dict[str, Any]]:
        """GET /_sim/wire: every request received outside /_sim/, oldest first (method, path, query, headers)."""
        params = {"limit": str(limit)} if limit else {}
        response = self._http().get("/_sim/wire", params=params)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def reset(self) -> None:
        """POST /_sim/reset."""
        self._http().post("/_sim/reset").raise_for_status()

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        """POST /_sim/config; returns the new (redacted) config. Raises ValueError when it is refused."""
        response = self._http().post("/_sim/config", json=changes)
        if response.status_code != 200:
            raise ValueError(response.json()["error"]["message"])
        result: dict[str, Any] = response.json()
        return result


def start_simulator_process(
    config_path: Path | None, extra_args: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m claudeq.simulator --port 0 …`, wait for its "listening on" line; return (process, base URL).

    The caller owns the process: terminate() it (SIGTERM stops it cleanly) and wait().
    """
    cmd = [sys.executable, "-m", "claudeq.simulator", "--port", "0"]
    if config_path is not None:
        cmd += ["--config", str(config_path)]
    cmd += list(extra_args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        # Keeps reading after the ready line so the pipe never fills and blocks the simulator; closes it at EOF.
        with stdout:
            for line in stdout:
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="claudeq-simulator-stdout", daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"simulator did not print its ready line within {START_TIMEOUT_S} s") from None
        if line is None:
            proc.wait()
            raise RuntimeError(f"simulator exited with code {proc.returncode} before it was ready")
        if line.startswith(READY_PREFIX):
            return proc, line[len(READY_PREFIX) :].strip()
