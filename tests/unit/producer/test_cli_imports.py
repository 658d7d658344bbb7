"""The producer's front ends (the CLI, the MCP server) load no SDK, no Celery worker machinery, no Prometheus client
and no worker code, like the client itself (tests/unit/test_layering.py): `claudeq exporter` loads the exporter only
when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tree import tree_env

#: Top-level names (and prefixes) a producer process must not load.
WORKER_ONLY = ("claude_agent_sdk", "prometheus_client", "celery.worker", "claudeq.worker")


def loaded_after(statement: str, cwd: Path) -> list[str]:
    """The worker-only modules in sys.modules after `statement`, in a fresh interpreter."""
    code = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({WORKER_ONLY!r}))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=tree_env(), cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize(
    "statement",
    [
        "import claudeq.producer.cli",
        "from claudeq.producer.cli import app, main",
        "import claudeq.producer.mcp_server",
    ],
)
def test_a_producer_loads_no_worker_machinery(statement: str, tmp_path: Path) -> None:
    assert loaded_after(statement, tmp_path) == []
