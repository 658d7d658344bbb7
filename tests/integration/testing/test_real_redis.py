"""The claudeq_fleet fixture against a real Redis (`--claudeq-redis-url`): claudeq.testing's own tests pass there
too, and every fleet removes its keys and queues when it closes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_the_kit_tests_pass_on_a_real_redis_and_leave_nothing(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    before = {*client.scan_iter(match="cqtest-*", count=1000), *client.scan_iter(match="claudeq-testing-*")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "unit" / "testing" / "test_fleet.py"),
            "--claudeq-redis-url",
            redis_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
    after = {*client.scan_iter(match="cqtest-*", count=1000), *client.scan_iter(match="claudeq-testing-*")}
    client.close()
    assert after - before == set()
