"""A command whose packages come with an extra the install lacks exits 1 with one line naming the extra, never a
traceback (docs/architecture.md#packaging). The packages are hidden here (None in sys.modules makes their import
fail as if they were not installed); tests/integration/test_packaging.py runs the same commands on a real base
install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from claudeq.producer.extras import missing_extra
from tests.support.tree import tree_env


def run_cli_without(hidden: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`claudeq ARGS` in a fresh interpreter in which the package `hidden` cannot be imported."""
    code = (
        f"import sys\nsys.modules[{hidden!r}] = None\nsys.argv = ['claudeq', *{list(args)!r}]\n"
        "from claudeq.producer.cli import main\nmain()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=tree_env(), cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("mcp", ["mcp"], "mcp"),
        ("jinja2", ["web"], "web"),
        ("fastapi", ["api"], "web"),
        ("fastapi", ["web"], "web"),
        ("prometheus_client", ["exporter", "--port", "0"], "worker"),
    ],
)
def test_a_command_without_its_extra_names_it(hidden: str, args: list[str], extra: str, tmp_path: Path) -> None:
    done = run_cli_without(hidden, *args, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line  # one line, not wrapped: the pip command can be copied whole
    assert line.endswith(f"pip install 'claudeq[{extra}]'")
    assert f"{hidden} is not installed" in line


def test_a_missing_module_no_extra_brings_is_raised_again() -> None:
    exc = ModuleNotFoundError("No module named 'not_ours'", name="not_ours")
    with pytest.raises(ModuleNotFoundError) as raised:
        missing_extra("claudeq mcp", exc)
    assert raised.value is exc
    sdk = ModuleNotFoundError("halted", name="claude_agent_sdk.types")
    assert missing_extra("claudeq x", sdk).endswith(
        "(claude_agent_sdk is not installed): pip install 'claudeq[worker]'"
    )
