"""`make demo`: exit 0 with every job as expected, one account rate-limited and routed
around, the conversation's turns on two workers, tokens and cost per account; nothing it started is left running;
the Redis on 6379 (when there is one) keeps its keys: the demo uses a private one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.e2e

MACHINE_REDIS = "redis://127.0.0.1:6379/0"


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (DEMO_RUN_ID=<id>)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                stat = (entry / "stat").read_text()
                if stat[stat.rfind(")") + 2] not in "ZX":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def machine_keys() -> set[bytes] | None:
    """The demo-shaped and default-prefix keys of the Redis on 6379, or None when nothing answers there."""
    try:
        client = redis.Redis.from_url(MACHINE_REDIS, socket_connect_timeout=0.5)
        client.ping()
    except redis.RedisError:
        return None
    try:
        keys: set[bytes] = set()
        for pattern in ("claudeq-demo-*", "claudeq:*", "_kombu.binding.claudeq-demo-*"):
            keys |= set(client.scan_iter(match=pattern, count=1000))
        return keys
    finally:
        client.close()


def test_make_demo_runs_everything_as_expected_and_leaves_nothing_behind() -> None:
    run_id = uuid.uuid4().hex[:8]
    before = machine_keys()
    env = {k: v for k, v in tree_env().items() if not k.startswith(("CLAUDEQ_", "ANTHROPIC_", "CLAUDE_CODE_"))}
    env["DEMO_RUN_ID"] = run_id
    done = subprocess.run(
        [sys.executable, str(ROOT / "ops" / "demo.py")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]
    assert "demo ok" in out and "every one ended as expected" in out
    lines = out.splitlines()
    for label, status in (
        ("plain answer", "succeeded"),
        ("worker-registered tool", "succeeded"),
        ("structured output", "succeeded"),
        ("conversation, turn 1", "succeeded"),
        ("conversation, turn 2", "succeeded"),
        ("transient 529, retried", "succeeded"),
        ("slow job, cancelled", "cancelled"),
        ("agent hands work to the fleet", "succeeded"),
        ("sub-task from the agent", "succeeded"),
        ("burst 1", "succeeded"),
    ):
        assert any(line.startswith(f"│ {label} ") and f" {status} " in line for line in lines), (label, out)
    assert "was rate-limited on demo-small and ran on demo-" in out
    turns = next(line for line in lines if line.startswith("conversation turn 1 on"))
    first, second = turns.split("turn 1 on ")[1].split(",")[0], turns.split("turn 2 on ")[1].split(",")[0]
    assert first != second, turns
    for account in ("demo-small", "demo-a", "demo-b"):
        row = next(line for line in lines if line.startswith(f"│ {account} "))
        cells = [c.strip() for c in row.strip("│").split("│")]
        if account != "demo-small":
            # input (plain, cache read, cache write: a first request's prompt is all cache write), output, cost
            assert int(cells[2]) + int(cells[4]) + int(cells[5]) > 0 and int(cells[3]) > 0 and float(cells[6]) > 0, row
    small = next(line for line in lines if line.startswith("│ demo-small "))
    assert int(small.split("│")[8].strip().split()[0]) >= 1, small  # rate-limited attempts
    assert "metrics    the workers served /metrics" in out
    assert "claude mcp add claudeq -- claudeq mcp" in out and "claudeq-worker" in out

    deadline = time.monotonic() + 10
    while processes_with(f"DEMO_RUN_ID={run_id}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(f"DEMO_RUN_ID={run_id}") == [], "the demo left processes running"
    after = machine_keys()
    assert after == before, "the demo touched the Redis on 6379"
