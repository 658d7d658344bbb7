"""Find and kill CLI processes by the CLAUDEQ_JOB_ID in their environment (reads /proc; Linux only)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from .cli_env import JOB_ID_VAR, RUN_ID_VAR

_PROC = Path("/proc")


def _environ(pid: int) -> bytes:
    try:
        return (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, a zombie, or not ours
        return b""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of `pid`, or None when it is gone."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[1])


def job_pids(job_id: str, parent: int | None = None) -> list[int]:
    """Live processes whose environment has CLAUDEQ_JOB_ID=<job_id> (children of `parent` only, if given)."""
    return _pids_with(f"{JOB_ID_VAR}={job_id}".encode(), parent)


def run_pids(run_id: str) -> list[int]:
    """Live processes of one run: its CLI and whatever the CLI started (tool commands inherit its environment)."""
    return _pids_with(f"{RUN_ID_VAR}={run_id}".encode(), None)


def cli_pid(run_id: str) -> int | None:
    """The pid of a run's CLI: the process of the run that this worker process started itself (the wrapper execs the
    CLI, so it keeps the pid the SDK spawned). None before it started or once it is gone."""
    me = os.getpid()
    for pid in run_pids(run_id):
        info = _stat(pid)
        if info is not None and info[1] == me:
            return pid
    return None


def sandbox_strays(pids: list[int], root: int, cli_bin: Path) -> list[int]:
    """The processes among `pids` (one sandboxed run's) that are not its sandbox's own, nor its CLI: a tool's command
    left running. The sandbox's own are `root` (bwrap, the process the worker started), bwrap's child in the PID
    namespace, the CLI under it, the forwarders (socat) the CLI's shell started before it became the CLI, and their
    children (one per open connection). Each is told by its program (`/proc/<pid>/exe`, by inode, not by name) and
    its parent; a process whose program cannot be read counts as a stray."""
    parents = {pid: info[1] for pid in pids if (info := _stat(pid)) is not None}
    bwrap, socat = shutil.which("bwrap"), shutil.which("socat")
    if bwrap is None or socat is None or not _runs(root, bwrap):
        return [p for p in pids if p != root]
    own, level = {root}, {root}
    for program in (bwrap, str(cli_bin), socat, socat):  # each level: children of the one before
        level = {p for p, parent in parents.items() if parent in level and _runs(p, program)}
        own |= level
    return [p for p in pids if p not in own]


def _runs(pid: int, program: str) -> bool:
    """Whether `pid` runs `program` (the same file: device and inode)."""
    try:
        running, wanted = os.stat(_PROC / str(pid) / "exe"), os.stat(program)
    except OSError:
        return False
    return (running.st_dev, running.st_ino) == (wanted.st_dev, wanted.st_ino)


def _pids_with(needle: bytes, parent: int | None) -> list[int]:
    found: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if needle not in _environ(pid).split(b"\0"):
            continue
        info = _stat(pid)
        if info is None or info[0] in ("Z", "X"):
            continue
        if parent is not None and info[1] != parent:
            continue
        found.append(pid)
    return sorted(found)


def uid_pids(uid: int) -> list[int]:
    """Live processes whose real or effective uid is `uid` (what a run under its own uid left behind)."""
    found: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                ids = line.split()[1:3]  # real, effective
                if str(uid) in ids and alive(int(entry.name)):
                    found.append(int(entry.name))
                break
    return sorted(found)


def all_job_pids() -> dict[int, str]:
    """Every live process started with some CLAUDEQ_JOB_ID, mapped to that job id."""
    prefix = f"{JOB_ID_VAR}=".encode()
    found: dict[int, str] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        for item in _environ(pid).split(b"\0"):
            if item.startswith(prefix):
                info = _stat(pid)
                if info is not None and info[0] not in ("Z", "X"):
                    found[pid] = item[len(prefix) :].decode(errors="replace")
                break
    return found


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    info = _stat(pid)
    return info is not None and info[0] not in ("Z", "X")


def kill_and_wait(pids: list[int], timeout_s: float = 2.0) -> list[int]:
    """SIGKILL `pids` and wait until they are gone (or zombies); return those still alive after `timeout_s`."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        except PermissionError:
            continue
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [p for p in left if alive(p)]
    return left
