"""`promtool` accepts the Prometheus config and the alert rules, and the rules' own unit tests pass.

promtool comes with the Debian `prometheus` package. Without it the tests skip locally; under CI=true they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.binaries import require_binary

PROMETHEUS_DIR = Path(__file__).resolve().parents[3] / "ops" / "prometheus"


def promtool() -> str:
    """The promtool binary; skip (locally) or fail (CI) when it is missing."""
    return require_binary("promtool", "apt-get install prometheus")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=60)


def test_promtool_check_config() -> None:
    result = run("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_rules() -> None:
    result = run("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_alert_unit_tests() -> None:
    result = run("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
