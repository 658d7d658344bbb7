"""Where the Claude CLI is, and the wrapper that starts it so it dies with the worker."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from functools import cache
from pathlib import Path

import claude_agent_sdk

from claudeq.config.settings import Settings
from claudeq.errors import ConfigError

WRAPPER_NAME = "claude-pdeathsig.sh"


def bundled_cli() -> Path:
    """The CLI bundled inside the installed claude-agent-sdk wheel."""
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
