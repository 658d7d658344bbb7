"""Reading what a run wrote under `$CLAUDEQ_OUTPUTS` (its run directory's `outputs`), as the worker may: the run's
uid owns that folder, so only regular files are read, never through a symlink, never a file with another link
(it could be some other file's), within a size cap (docs/jobs.md#artifacts)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: The folder of a run directory that is the run's `$CLAUDEQ_OUTPUTS`.
OUTPUTS_DIR = "outputs"
#: The most files one attempt keeps.
MAX_FILES = 1000


def read_outputs(folder: Path, max_bytes: int) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(name, bytes) of the regular files under `folder`, by name, while their sizes add up to at most `max_bytes`;
    and the names of what was left out (blocking)."""
    kept: list[tuple[str, bytes]] = []
    dropped: list[str] = []
    total = 0
    if not folder.is_dir() or folder.is_symlink():
        return kept, dropped
    names: list[str] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]  # named (dropped), never entered
        for name in sorted([*files, *links]):
            names.append(os.path.relpath(os.path.join(root, name), folder))
    for name in names:
        if len(kept) >= MAX_FILES:
            dropped.append(name)
            continue
        data = _read_plain(folder / name, max_bytes - total)
        if data is None:
            dropped.append(name)
            continue
        total += len(data)
        kept.append((Path(name).as_posix(), data))
    return kept, dropped


def _read_plain(path: Path, room: int) -> bytes | None:
    """The file's bytes if it is a regular file with one link and at most `room` bytes, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > room:
            return None
        chunks: list[bytes] = []
        left = st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
