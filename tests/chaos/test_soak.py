"""The bounded fault soak (`make soak` runs the long one): 3 worker processes, 3 simulated accounts (one API-key
account with a small window), simulator faults on (5 % 529, 2 % stalls past the idle timeout, 2 % dropped
connections), a killer that SIGKILLs a random worker every ~10 s and starts a new one, and a Redis restart (AOF
on). Afterwards every invariant is read from a witness outside claudeq (tests/chaos/fleet.py): the simulator's
request log and in-flight counters, the process table, Redis.

Workers keep warm CLIs, as they do by default. Size: 60 jobs, one to three minutes on the 2-core development
machine under other suites' load (68 s at load average ~8-15, 158 s at ~15; with a cold CLI per run, ~1.6 s of CPU
per job with its worker's share: 155 s at ~9, 383 s at ~13). 300 jobs took ~16 minutes there at load ~20-27, past
the bounded suite's budget of ~5 minutes for all of tests/chaos/. `make soak` runs 3,000."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.fleet import SoakConfig, run_soak
from tests.support.redis_server import PrivateRedis

pytestmark = pytest.mark.e2e

BOUNDED_JOBS = 60


@pytest.mark.timeout(1200)
def test_fault_soak_loses_duplicates_overlaps_orphans_leaks_nothing(aof_redis: PrivateRedis, tmp_path: Path) -> None:
    config = SoakConfig(jobs=BOUNDED_JOBS, redis_restarts=1, warm=True, deadline_s=900, log_dir=tmp_path)
    report = run_soak(config, aof_redis, progress=print)
    print(report.table())
    assert report.kills >= 1 and report.redis_restarts == 1 and report.faults_injected >= 1, report.table()
    assert all(count == 0 for count in report.zeros().values()), f"{report.table()}\n{report.problems()}"
    assert sum(report.statuses.values()) == BOUNDED_JOBS
