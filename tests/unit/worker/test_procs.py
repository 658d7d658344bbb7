"""claudeq.worker.run.procs: find processes by CLAUDEQ_JOB_ID and kill them."""

from __future__ import annotations

import os
import subprocess
import sys

from claudeq.worker.run import procs


def test_finds_and_kills_a_job_process(unique: str) -> None:
    env = {**os.environ, "CLAUDEQ_JOB_ID": f"procs-{unique}"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        assert procs.job_pids(f"procs-{unique}") == [child.pid]
        assert procs.job_pids(f"procs-{unique}", parent=os.getpid()) == [child.pid]
        assert procs.job_pids(f"procs-{unique}", parent=1) == []
        assert procs.job_pids(f"procs-{unique}x") == []
        assert procs.all_job_pids()[child.pid] == f"procs-{unique}"
        assert procs.kill_and_wait([child.pid], timeout_s=5) == []
        assert procs.job_pids(f"procs-{unique}") == []  # a zombie is not a live process
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(child.pid)
