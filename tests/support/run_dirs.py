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
