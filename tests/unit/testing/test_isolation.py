"""The acceptance test of claudeq.testing: a user's test file that imports only claudeq and claudeq.testing (the
example project's, as docs/testing.md shows) passes with no Redis server, no CLI, no network and no worker process.

The example's tests run in a fresh interpreter in which every socket connection, every child process and every fork
raises (and is counted), `PATH` holds no `claude`, and the Redis URLs point at a port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "triage"

#: Run first in the child: cut it off from the network and from other processes, then run pytest on the example.
BLOCKED = """
import os, socket, subprocess, sys

attempts = []

def refuse(what):
    def blocked(*args, **kwargs):
        attempts.append(what)
        raise OSError(f"claudeq.testing isolation: {what} is not allowed here")
    return blocked

socket.socket.connect = refuse("socket.connect")
socket.socket.connect_ex = refuse("socket.connect_ex")
socket.create_connection = refuse("socket.create_connection")
subprocess.Popen.__init__ = refuse("subprocess.Popen")
os.fork = refuse("os.fork")
os.posix_spawn = refuse("os.posix_spawn")
os.posix_spawnp = refuse("os.posix_spawnp")
for name in ("execv", "execve", "execvp", "execvpe"):
    setattr(os, name, refuse("os." + name))

import pytest

code = pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestDeprecationWarning"])
print("BLOCKED-ATTEMPTS", len(attempts), sorted(set(attempts)))
sys.exit(int(code))
"""


def test_the_example_tests_pass_with_no_redis_cli_network_or_worker(tmp_path: Path) -> None:
    env = {
        "PATH": str(tmp_path),  # no `claude`, no `redis-server`: nothing to run
        "HOME": str(tmp_path),
        "CLAUDEQ_REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
        "CLAUDEQ_TESTING_REDIS_URL": "",
        "CLAUDEQ_CLI_PATH": str(tmp_path / "no-such-claude"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, str(EXAMPLE)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert " passed" in out and "failed" not in out, out
    assert "BLOCKED-ATTEMPTS 0 []" in out, out  # nothing even tried


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """The harness above would catch a test that connects or spawns (its count is not vacuous)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import socket\n\ndef test_connect():\n    socket.create_connection(('127.0.0.1', 1))\n")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, str(probe)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "BLOCKED-ATTEMPTS 1 ['socket.create_connection']" in done.stdout
