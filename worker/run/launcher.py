"""Where the Claude CLI is, and the wrapper that starts it so it dies with the worker."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from claudeq.errors import ConfigError

from ...config.settings import Settings, WorkerPolicy
from . import procs

WRAPPER_NAME = "claude-pdeathsig.sh"


def bundled_cli() -> Path:
    """The CLI bundled inside the installed claude-agent-sdk wheel."""
    import claude_agent_sdk  # here, not at import: the testing kit imports this module without the SDK

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def locate_cli(settings: Settings) -> Path:
    """The CLI to run: `settings.cli_path`, else the SDK's bundled one; raise ConfigError saying how to fix it."""
    path = settings.cli_path or bundled_cli()
    if not path.is_file():
        where = "CLAUDEQ_CLI_PATH" if settings.cli_path else "the claude-agent-sdk wheel"
        raise ConfigError(
            "CLAUDEQ_CLI_PATH",
            f"Claude CLI not found at {path} ({where}); reinstall claude-agent-sdk for this platform "
            "or set CLAUDEQ_CLI_PATH to a `claude` binary",
        )
    if not os.access(path, os.X_OK):
        raise ConfigError("CLAUDEQ_CLI_PATH", f"{path} is not executable; chmod +x it")
    return path


@cache
def wrapper_path() -> Path:
    """An executable copy of the parent-death wrapper (the packaged one if it kept its mode bit)."""
    packaged = Path(__file__).with_name(WRAPPER_NAME)
    if not packaged.is_file():
        raise ConfigError("worker", f"{packaged} is missing from the installation; reinstall claudeq")
    if os.access(packaged, os.X_OK):
        return packaged
    # Some installers drop the executable bit from package data; the SDK execs cli_path directly, so copy it.
    target = Path(tempfile.gettempdir()) / f"claudeq-{os.getuid()}-{WRAPPER_NAME}"
    shutil.copyfile(packaged, target)
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR)
    return target


def python_for_wrapper() -> str:
    """The interpreter the wrapper falls back to when setpriv is missing."""
    return sys.executable


# --- A uid of its own for runs that execute commands or write files ----------------------------------------------

#: Environment variables the wrapper reads to switch the CLI to the run's own uid, gid and groups.
RUN_UID_VAR = "CLAUDEQ_RUN_UID"
RUN_GID_VAR = "CLAUDEQ_RUN_GID"
RUN_GROUPS_VAR = "CLAUDEQ_RUN_GROUPS"


@dataclass
class RunIdentity:
    """The uid/gid one run's CLI (and every command it starts) runs under, held until `release`.

    Held with an exclusive flock on a per-uid lock file, so no two runs on this host share a uid at once (the lock
    goes with the process if the worker dies). Whatever is still running under the uid is killed on acquiring it
    and on release: a command that cleared its environment escapes the sweep by run id, not the one by uid."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    _lock_fd: int

    def env(self) -> dict[str, str]:
        """What the wrapper needs to drop to this identity."""
        return {
            RUN_UID_VAR: str(self.uid),
            RUN_GID_VAR: str(self.gid),
            RUN_GROUPS_VAR: ",".join(str(g) for g in self.groups),
        }

    def give(self, path: Path) -> None:
        """Make `path` (and everything under it) this run's own."""
        _chown_tree(path, self.uid, self.gid)

    def release(self) -> None:
        """Kill what is left under the uid, then free it for another run (blocking)."""
        procs.kill_and_wait(procs.uid_pids(self.uid), timeout_s=2.0)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1


def can_switch_uid() -> bool:
    """Whether this worker can run a CLI under another uid (it runs as root: setpriv, or the wrapper's fallback)."""
    return os.geteuid() == 0


def uid_lock_dir() -> Path:
    """Where the per-uid lock files live (one directory per host, root only)."""
    path = Path(tempfile.gettempdir()) / "claudeq-run-uids"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def acquire_identity(policy: WorkerPolicy) -> RunIdentity:
    """A free uid of `policy.run_uids` for one run (blocking; call it off the event loop).

    Raises ConfigError when every uid of the range is in use: the range is smaller than the runs on this host."""
    first, last = policy.run_uids
    lock_dir = uid_lock_dir()
    span = last - first + 1
    start = secrets.randbelow(span)  # spread runs over the range: a uid is reused as late as it can be
    for i in range(span):
        uid = first + (start + i) % span
        fd = os.open(lock_dir / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        identity = RunIdentity(uid=uid, gid=uid, groups=tuple(policy.run_groups), _lock_fd=fd)
        procs.kill_and_wait(procs.uid_pids(uid), timeout_s=2.0)  # left over from a worker that died mid-run
        return identity
    raise ConfigError(
        "CLAUDEQ_POLICY__RUN_UIDS",
        f"all {span} uids of {first}-{last} are in use by runs on this host; widen the range",
    )


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def take_back(path: Path) -> None:
    """Return a handed-over config dir to the worker's uid."""
    _chown_tree(path, os.geteuid(), os.getegid())


def exposed_secret_files(settings: Settings, groups: Iterable[int] = ()) -> list[Path]:
    """Files holding secrets that a run under another uid could read: account token files and the worker's `.env`.

    A file is exposed when every directory above it can be entered and the file itself read by "others", or by one
    of `groups` (the runs' supplementary groups)."""
    candidates = [a.token_file for a in settings.accounts.accounts if a.token_file is not None]
    dotenv = Path(".env")
    if dotenv.is_file():
        candidates.append(dotenv)
    return [path for path in candidates if _readable_by_others(path.resolve(), frozenset(groups))]


def closed_to_others(path: Path, groups: Iterable[int] = (), *, execute: bool = False) -> Path | None:
    """The first directory on the way to `path` (or `path` itself, with `execute`: a program to run) that a run
    under another uid, with supplementary `groups`, cannot enter or run; None when it can."""
    gids = frozenset(groups)
    target = path.resolve()
    for step in [*reversed(target.parents), *([target] if target.is_dir() or execute else [])]:
        try:
            st = step.stat()
        except FileNotFoundError:
            break  # the worker makes the rest (mode 0711)
        if not (st.st_mode & stat.S_IXOTH or (st.st_gid in gids and st.st_mode & stat.S_IXGRP)):
            return step
    return None


def _readable_by_others(path: Path, groups: frozenset[int]) -> bool:
    def allowed(st: os.stat_result, other_bit: int, group_bit: int) -> bool:
        return bool(st.st_mode & other_bit) or (st.st_gid in groups and bool(st.st_mode & group_bit))

    try:
        for parent in reversed(path.parents):
            if not allowed(parent.stat(), stat.S_IXOTH, stat.S_IXGRP):
                return False
        return allowed(path.stat(), stat.S_IROTH, stat.S_IRGRP)
    except OSError:
        return False
