"""A run's CLI in a bubblewrap sandbox of its own: the files, processes and network it may see, held by the kernel.

The runner writes the sandbox's arguments into the run directory (`ARGS_FILE`, NUL-separated: bwrap's `--args`);
the wrapper (`claude-pdeathsig.sh`) starts `bwrap` with them around the CLI, after dropping to the run's uid on a
root worker. Inside, a forwarder (socat) listens on the pass-through's loopback port and carries each connection to
the pass-through's Unix socket, bound into the sandbox: the run's network namespace has nothing else
(docs/architecture.md#the-run-sandbox).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from claudeq.models import JobSpec
from claudeq.permissions import allowed_builtin_tools

from ...config.settings import WorkerPolicy

#: The file in the run directory holding the sandbox's arguments.
ARGS_FILE = "sandbox.args"
#: Environment variables the wrapper reads: the arguments file, and the forwards to set up inside
#: (`port=socket port=socket`, the socket's path inside the sandbox).
ARGS_VAR = "CLAUDEQ_SANDBOX_ARGS"
FORWARD_VAR = "CLAUDEQ_SANDBOX_FORWARD"
#: Where forwarded sockets appear inside the sandbox.
SOCKET_DIR = "/run/claudeq"
#: Read-only system directories every sandbox sees (the CLI's runtime and its tools' programs).
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PROBE_TIMEOUT_S = 10.0


def sandboxed(spec: JobSpec, policy: WorkerPolicy) -> bool:
    """Whether a run of `spec` runs its CLI in a sandbox of its own: it is offered a built-in tool, and the policy's
    sandbox is not off. Tool-less runs (in-process MCP tools run in the worker) are not sandboxed."""
    return policy.sandbox != "off" and bool(allowed_builtin_tools(spec, policy))


@dataclass(frozen=True)
class Forward:
    """A TCP port inside the sandbox's loopback carried to a Unix socket outside."""

    port: int
    socket: Path

    def inside(self, index: int) -> str:
        """The socket's path inside the sandbox."""
        return f"{SOCKET_DIR}/forward-{index}.sock"


@dataclass(frozen=True)
class SandboxView:
    """What one run's sandbox shows: its workspace, its run directory, the CLI, its forwards; nothing else."""

    cli: Path
    run_dir: Path
    cwd: Path
    add_dirs: Sequence[Path] = ()
    writable: bool = False  # the workspace is writable (the profile writes files or runs commands)
    config_dir: Path | None = None  # an account's interactive login, used in place
    forwards: Sequence[Forward] = field(default_factory=tuple)
    share_net: bool = False

    def args(self) -> list[str]:
        """bwrap's arguments (before the command)."""
        args = ["--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns"]
        if self.share_net:
            args.append("--share-net")
        for name in SYSTEM_DIRS:
            path = Path(name)
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), name]
            elif path.is_dir():
                args += ["--ro-bind", name, name]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        args += _bind("--ro-bind", self.cli)
        args += _bind("--bind", self.run_dir)
        if self.config_dir is not None:
            args += _bind("--bind", self.config_dir)
        mode = "--bind" if self.writable else "--ro-bind"
        for path in dict.fromkeys([self.cwd, *self.add_dirs]):
            args += _bind(mode, path)
        for index, forward in enumerate(self.forwards):
            args += ["--bind", str(forward.socket), forward.inside(index)]
        args += ["--chdir", str(self.cwd)]
        return args

    def fingerprint(self) -> str:
        """What this view shows, for the warm-CLI key (docs/architecture.md#warm-clis): its arguments (build the view
        with a placeholder run directory: each CLI has its own), and the identity (device, inode) of each workspace
        directory, so a directory replaced at the same path, or a symlink pointed elsewhere, gives another key (a
        sandbox keeps what its paths led to when it started, for its whole life)."""
        dirs = {str(path): _identity(path) for path in [self.cwd, *self.add_dirs]}
        blob = json.dumps([self.args(), self.forward_spec(), dirs], separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def forward_spec(self) -> str:
        """The forwards as the wrapper reads them (`FORWARD_VAR`)."""
        return " ".join(f"{f.port}={f.inside(i)}" for i, f in enumerate(self.forwards))

    def write(self) -> Path:
        """Write the arguments into the run directory (mode 0644: bwrap reads them as the run's uid)."""
        path = self.run_dir / ARGS_FILE
        path.write_bytes(b"".join(arg.encode() + b"\0" for arg in self.args()))
        return path


def _bind(mode: str, path: Path) -> list[str]:
    """Bind `path` at its own place, and at its real path too when a symlink leads there (the CLI may use either)."""
    real = Path(os.path.realpath(path))
    out = [mode, str(real), str(path)]
    if real != path:
        out += [mode, str(real), str(real)]
    return out


def _identity(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


_WORKS: set[int | None] = set()  # the uids a sandbox was seen to start for, in this process


def problem(run_uid: int | None) -> str | None:
    """Why a sandbox cannot start on this host, for a CLI under `run_uid` (None: the worker's own); None when it
    can. Tried until it works once per worker process (a failure is tried again at the next run: a loaded host's
    timeout must not refuse every later run): bwrap with every namespace, as that uid, and the forwarder inside."""
    if run_uid in _WORKS:
        return None
    why = _try(run_uid)
    if why is None:
        _WORKS.add(run_uid)
    return why


def forget() -> None:
    """Try the sandbox afresh at the next run (tests change the host under a worker's code)."""
    _WORKS.clear()


def _try(run_uid: int | None) -> str | None:
    bwrap, socat = shutil.which("bwrap"), shutil.which("socat")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if socat is None:
        return "socat (the sandbox's forwarder to its pass-through) is not installed"
    command = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    command += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", socat, "-V"]
    setpriv = shutil.which("setpriv")
    if run_uid is not None:
        if setpriv is None:
            return "setpriv (util-linux) is not installed: a root worker starts the sandbox as the run's uid with it"
        command = [setpriv, f"--reuid={run_uid}", f"--regid={run_uid}", "--clear-groups", "--no-new-privs", *command]
    elif setpriv is not None:
        command = [setpriv, "--inh-caps=-all", "--ambient-caps=-all", *command]  # as the wrapper starts it
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start: {type(exc).__name__}: {exc}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"bwrap failed (exit {done.returncode}): {said[-1] if said else 'no output'}"
    return None


def isolation(policy: WorkerPolicy) -> tuple[str, str | None]:
    """Which isolation runs with tools get on this host, in words, and the problem that keeps it from starting
    (None when there is none): what `claudeq config check` reports."""
    root = os.geteuid() == 0
    uid = f"a uid of its own ({policy.run_uids[0]}-{policy.run_uids[1]})" if root else "the worker's uid"
    if policy.sandbox == "off":
        return f"off (CLAUDEQ_POLICY__SANDBOX=off): runs with tools are held by the workspace hook and {uid}", None
    why = problem(policy.run_uids[0] if root else None)
    words = f"bwrap: each run with tools in a sandbox of its own (mount, PID, network namespaces) under {uid}"
    if why is None:
        return words, None
    return f"{words} - unavailable", (
        f"runs with tools are refused: their sandbox cannot start ({why}); install bubblewrap and socat, or set "
        "CLAUDEQ_POLICY__SANDBOX=off"
    )
