"""The parent-death wrapper: when it cannot exec the CLI it says so in one line the runner recognises, with or
without setpriv, and the runner turns that line into a permanent start errno."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claudeq.worker.run.launcher import wrapper_path
from claudeq.worker.run.outcome import RunOutcome
from claudeq.worker.run.runner import exec_errno


def _run_wrapper(binary: Path, path_env: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path_env, "CLAUDEQ_CLAUDE_BIN": str(binary), "CLAUDEQ_PYTHON": sys.executable}
    return subprocess.run(
        ["/bin/sh", str(wrapper_path()), "--version"], env=env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_a_failed_exec_is_one_recognisable_line(tmp_path: Path, with_setpriv: bool) -> None:
    broken = tmp_path / "claude"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    no_exec = tmp_path / "claude-no-x"
    no_exec.write_text("#!/bin/sh\n")
    no_exec.chmod(0o644)
    path_env = os.environ.get("PATH", "/usr/bin:/bin") if with_setpriv else str(tmp_path)  # no setpriv there
    for binary, code in ((broken, errno.ENOENT), (no_exec, errno.EACCES)):
        done = _run_wrapper(binary, path_env)
        assert done.returncode in (126, 127), done
        assert exec_errno(done.stderr.splitlines(), RunOutcome()) == code, done.stderr
