"""Directories a run's own uid can reach: a root worker runs shell and file-tool jobs under a uid of the run range,
and pytest's tmp_path lies under a 0700 directory that uid cannot enter (docs/workers.md#security-defaults)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def open_base(prefix: str) -> Iterator[Path]:
    """A fresh directory under /tmp that any uid may enter (mode 0711), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def group_workspace(path: Path, gid: int) -> Path:
    """Make `path` a workspace root the runs share through group `gid` (the policy's run_groups): owned by root and
    that group, g+rwx, setgid so what one run writes stays the group's."""
    path.mkdir()
    os.chown(path, 0, gid)
    path.chmod(0o2770)
    return path


def non_root_worker(base: Path, uid: int, gid: int) -> tuple[dict[str, str], list[str]]:
    """How a test starts a worker that is not root: its environment (a home of its own under `base`) and the command
    prefix that drops to `uid` with the workspace group `gid`. CAP_DAC_READ_SEARCH only so that it can load this
    checkout's interpreter (under /root); the wrapper hands no capability on to the CLI, so its runs have none."""
    home = base / "worker-home"
    home.mkdir(mode=0o700)
    os.chown(home, uid, uid)
    prefix = [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        f"--groups={gid}",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]
    return {"HOME": str(home)}, prefix
