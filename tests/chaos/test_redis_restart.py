"""Redis restarts mid-run (a private server with AOF on, as docker-compose.yml runs it; SIGTERM, two seconds down,
the same port again): the workers' and the producer's clients reconnect, the runs in flight go on, finish and are
recorded, once; a job submitted after the restart runs too. The simulator's log is the witness that nothing ran
twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.models import TERMINAL
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until
from tests.support.redis_server import PrivateRedis
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e


@pytest.fixture
def redis_url(aof_redis: PrivateRedis) -> str:
    return aof_redis.url


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path) -> Settings:
    # A lease outlives the restart (15 s against ~3 s down): the runs have no reason to stop.
    return make_settings(redis_url, unique, accounts_file=accounts_file, **{**FAST_E2E, "lease_ttl_s": 15})


def answering(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` polled through an outage: a connection error is just "not yet"."""

    def poll() -> Any:
        try:
            return fn()
        except redis.ConnectionError:
            return None

    return poll


def requests_of(simulator: Any, marker: str) -> list[dict[str, Any]]:
    return [e for e in simulator.requests() if any(marker in str(m.get("text")) for m in e.get("messages", []))]


def test_runs_in_flight_survive_a_redis_restart_and_clients_reconnect(
    client: Client, workers: WorkerFactory, simulator: Any, aof_redis: PrivateRedis, unique: str
) -> None:
    fleet = [workers(wait=False), workers(wait=False)]
    for worker in fleet:
        worker.wait_ready(120)  # two worker starts at once on a loaded machine take a while
    markers = [f"restart-{unique}-{i}" for i in range(4)]
    jobs = [client.submit(prompt=f"[[sim: stall 8]] {m}", idle_timeout_s=60) for m in markers]
    ids = [j.id for j in jobs]
    run_until(lambda: len({pid for pid in claude_pids(ids)}) >= 4, 90, what="four runs in flight")
    run_until(lambda: all(requests_of(simulator, m) for m in markers), 60, what="every run's request in flight")

    aof_redis.restart(down_s=2.0)

    done = run_until(
        answering(lambda: all(run_call(client.store.status_call(i)) in TERMINAL for i in ids)),
        120,
        0.2,
        what="all finished",
    )
    assert done
    for job_id, marker in zip(ids, markers, strict=True):
        record = client.get(job_id)
        assert record.status == "succeeded", (record.attempts, record.error)
        assert [a.outcome for a in record.attempts] == ["success"], record.attempts
        assert len(requests_of(simulator, marker)) == 1  # the simulator served it once
    after = client.submit(prompt=f"after the restart {unique}")
    assert client.wait(after.id, timeout=120).status == "succeeded"
    assert all(w.alive() for w in fleet)
