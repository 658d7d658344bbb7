"""Where a run works, under which uid, and the session-store project key of its directory (no SDK needed).

The session planner, the warm pool, the runner and the testing kit's scripted runs all derive a run's directory
here, so a session's transcript key (derived from the cwd) is the same whichever of them computes it.

The project key is the SDK's `project_key_for_directory` when the SDK is installed. The testing kit runs on the
producer install (docs/testing.md), which has no SDK, so the same derivation is carried here — the CLI's directory
naming: realpath, NFC, every character outside [a-zA-Z0-9] made a hyphen, and past 200 characters a 32-bit string
hash in base 36. tests/unit/worker/test_workdirs.py checks it against the SDK's.
"""

from __future__ import annotations

import os
import re
import tempfile
import unicodedata
from pathlib import Path

from claudeq.models import JobSpec
from claudeq.permissions import allowed_builtin_tools

from ...config.settings import FILE_TOOLS, WorkerPolicy
from .launcher import can_switch_uid


def default_cwd(own_uid: bool = False) -> Path:
    """Where a job without a cwd runs: an empty, stable directory (never the worker's own cwd and its files).

    Stable because a session's transcript key is derived from the cwd: a resumed session must see the same one.
    A run under a uid of its own (`own_uid`, see `runs_under_own_uid`) gets one it may enter (mode 0555).
    """
    if not own_uid:
        path = Path(tempfile.gettempdir()) / f"claudeq-empty-cwd-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        return path
    path = Path(tempfile.gettempdir()) / f"claudeq-empty-cwd-{os.getuid()}-runs"
    path.mkdir(mode=0o555, exist_ok=True)
    if path.stat().st_mode & 0o777 != 0o555:
        path.chmod(0o555)  # runs may enter it, nobody may put anything in it
    return path


def runs_under_own_uid(spec: JobSpec, policy: WorkerPolicy) -> bool:
    """Whether a run of `spec` gets a uid of its own: it is offered a tool that executes commands or writes files
    (always; a worker that cannot switch uids refuses it unless the policy accepts a shared uid), or a file tool
    that reads and this worker can switch uids (it runs as root): then the kernel, not only the workspace hook,
    keeps the run from files outside the workspace roots. A worker that is not root runs read-only file tools
    under its own uid, held by the hook and its sandbox (docs/workers.md#security-defaults). On a root worker every
    sandboxed run gets one."""
    tools = allowed_builtin_tools(spec, policy)
    if policy.isolated_tools(tools):
        return True
    if not can_switch_uid():
        return False
    # A root worker never starts a sandbox as root: the sandbox's namespaces are made by the run's own uid.
    return bool(FILE_TOOLS.intersection(tools)) or (policy.sandbox != "off" and bool(tools))


_MAX_SANITIZED_LENGTH = 200
_SANITIZE_RE = re.compile(r"[^a-zA-Z0-9]")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _simple_hash(text: str) -> str:
    """The CLI's 32-bit string hash (JavaScript `(h << 5) - h + c`, `|= 0`), absolute, in base 36."""
    h = 0
    for ch in text:
        h = ((h << 5) - h + ord(ch)) & 0xFFFFFFFF
        if h >= 0x80000000:
            h -= 0x100000000
    n = abs(h)
    if n == 0:
        return "0"
    digits: list[str] = []
    while n:
        n, d = divmod(n, 36)
        digits.append(_BASE36[d])
    return "".join(reversed(digits))


def _canonical(directory: str) -> str:
    try:
        return unicodedata.normalize("NFC", os.path.realpath(directory))
    except OSError:
        return unicodedata.normalize("NFC", directory)


def local_project_key(directory: str | Path | None = None) -> str:
    """The project key of `directory` (default: the current directory), derived without the SDK."""
    path = _canonical(str(directory) if directory is not None else ".")
    sanitized = _SANITIZE_RE.sub("-", path)
    if len(sanitized) <= _MAX_SANITIZED_LENGTH:
        return sanitized
    return f"{sanitized[:_MAX_SANITIZED_LENGTH]}-{_simple_hash(path)}"


def project_key_for_directory(directory: str | Path | None = None) -> str:
    """The SDK's project key of `directory` when the SDK is installed, else the same key derived here."""
    try:
        from claude_agent_sdk import project_key_for_directory as sdk_key
    except ImportError:
        return local_project_key(directory)
    return str(sdk_key(directory))
