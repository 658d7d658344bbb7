"""docs/simulator.md's "A worker on the simulator" works as written: its five commands, run by bash, bring up a
simulator and a worker and run a job to its answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from tests.integration.test_prometheus import free_port
from tests.support.procs import kill_claude
from tests.support.tree import ROOT
from tests.support.worker_proc import worker_env

pytestmark = pytest.mark.e2e

#: The commands' port, replaced by a free one so tests running at once do not meet.
DOC_PORT = "8790"


def doc_commands() -> list[str]:
    """The shell block of the section, line by line."""
    section = (ROOT / "docs/simulator.md").read_text().split("### A worker on the simulator", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the section lost its shell block"
    return block.group(1).strip().splitlines()


def test_the_five_commands_run_a_job_on_a_worker_on_the_simulator(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    commands = doc_commands()
    assert len(commands) == 5, commands
    port = str(free_port())
    # Whatever the lines start in the background is stopped when the script ends, as a reader's Ctrl-C would.
    script = "\n".join(["trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT", "set -e", *commands]).replace(DOC_PORT, port)
    # A reader types the last line once the simulator is up; the script waits for its port as long.
    until_up = f"until (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null; do sleep 0.1; done\n"
    script = script.replace("claudeq submit", until_up + "claudeq submit")
    env = worker_env(settings, [])
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this environment's commands
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    job_ids = [i.decode() for i in redis_client.zrange(f"{settings.key_prefix}jobs", 0, -1)]
    assert not kill_claude(job_ids), "a CLI outlived the worker"
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].endswith("  succeeded") and lines[-1] == "hello from the simulator", done.stdout + done.stderr
