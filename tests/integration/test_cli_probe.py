"""`ops/cli_probe.py` re-measures the CLI facts of docs/cli-behaviour.md; these runs pin two of them."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _probe(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "ops" / "cli_probe.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_an_api_error_is_is_error_with_subtype_success_and_one_request() -> None:
    out = _probe(f"{uuid.uuid4().hex[:8]} [[sim: error 529]]")
    (result,) = [line for line in out.splitlines() if " ResultMessage " in line]
    assert "'subtype': 'success'" in result and "'is_error': True" in result
    assert "'api_error_status': 529" in result
    assert out.count("request: ") == 1  # CLAUDE_CODE_MAX_RETRIES=0: the CLI does not retry
    assert "CLI: peak RSS" in out


def test_interrupt_ends_a_stalled_run_with_an_aborted_result() -> None:
    out = _probe(f"{uuid.uuid4().hex[:8]} [[sim: stall 30]]", "--partial", "--stop-after", "3")
    lines = out.splitlines()
    assert any("StreamEvent {'event': 'message_start'}" in line for line in lines)  # liveness before the stall
    assert any(line.startswith("interrupt() took") for line in lines)
    (result,) = [line for line in lines if " ResultMessage " in line]
    assert "'subtype': 'error_during_execution'" in result and "'terminal_reason': 'aborted_streaming'" in result
