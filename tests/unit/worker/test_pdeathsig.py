"""The CLI wrapper (worker/run/claude-pdeathsig.sh) sets the parent-death signal with setpriv, or from Python when
setpriv is missing: either way the CLI keeps the wrapper's pid and is SIGKILLed when the process that started it
dies (a killed worker leaves no CLI calling the API)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from claudeq.worker.run.launcher import wrapper_path
from tests.support.procs import run_until
from tests.support.tree import tree_env

#: Stands in for the CLI: prints its pid and its parent-death signal (prctl PR_GET_PDEATHSIG), then waits.
FAKE_CLI = f"""#!{sys.executable}
import ctypes, os, sys, time
sig = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig))
print(os.getpid(), sig.value, " ".join(sys.argv[1:]), flush=True)
time.sleep(120)
"""

#: Stands in for the worker: starts the wrapper, prints the child's pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:])
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    path = tmp_path / "fake-claude"
    path.write_text(FAKE_CLI)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("setpriv", ["present", "missing"])
def test_cli_dies_with_the_process_that_started_it(setpriv: str, fake_cli: Path, tmp_path: Path) -> None:
    if setpriv == "present":
        path = os.environ.get("PATH", "/usr/bin:/bin")
        assert any((Path(d) / "setpriv").exists() for d in path.split(os.pathsep)), "setpriv (util-linux) missing"
    else:
        (tmp_path / "empty-bin").mkdir()
        path = str(tmp_path / "empty-bin")  # no setpriv (nor anything else) on PATH: the Python fallback
    env = tree_env(PATH=path, CLAUDEQ_CLAUDE_BIN=str(fake_cli), CLAUDEQ_PYTHON=sys.executable)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(wrapper_path()), "--print", "x"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = -1
    try:
        child = int(parent.stdout.readline())
        cli_pid, pdeathsig, args = parent.stdout.readline().split(" ", 2)
        assert int(cli_pid) == child  # exec all the way: the CLI is the process the SDK started
        assert int(pdeathsig) == signal.SIGKILL
        assert args.strip() == "--print x"
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        run_until(lambda: not _alive(child), 10, what="the CLI dying with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        parent.stdout.close()
        if child > 0 and _alive(child):
            os.kill(child, signal.SIGKILL)
