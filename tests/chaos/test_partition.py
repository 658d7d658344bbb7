"""A partition: one worker reaches Redis through a TCP proxy that the test freezes for 30 s (longer if the
rescue takes longer) (connections open, no
byte moves) while it runs a job. Its run is stopped before its lease expires, the job finishes on the other
worker, once (the simulator never sees the two runs at once), and when the proxy thaws the cut-off worker writes
nothing over the result and goes on working.

(tests/e2e/test_frozen_redis.py times the stop against the lease's expiry alone.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until
from tests.support.tcp_proxy import FreezableProxy

pytestmark = pytest.mark.e2e

FREEZE_S = 30


@pytest.fixture
def proxy(settings: Settings) -> Iterator[FreezableProxy]:
    url = redis.connection.parse_url(settings.redis_url)
    server = FreezableProxy(str(url.get("host", "127.0.0.1")), int(url.get("port", 6379)))
    yield server
    server.close()


def requests_of(simulator: Any, marker: str) -> list[dict[str, Any]]:
    return [e for e in simulator.requests() if any(marker in str(m.get("text")) for m in e.get("messages", []))]


def test_a_partitioned_worker_stops_its_run_and_the_job_finishes_elsewhere_once(
    client: Client,
    workers: WorkerFactory,
    settings: Settings,
    proxy: FreezableProxy,
    simulator: Any,
    unique: str,
) -> None:
    assert settings.redis_url.startswith("redis://127.0.0.1") and "@" not in settings.redis_url
    db = int(settings.redis_url.rsplit("/", 1)[-1] or 0)
    cut_off = workers(redis_url=proxy.url(db), lease_ttl_s=4, heartbeat_s=1, wait=False)
    cut_off.wait_ready(120)
    marker = f"partition-{unique}"
    # Stalls on its first request only: the run elsewhere answers at once.
    job = client.submit(prompt=f"[[sim: stall 120 times=1]] {marker}", idle_timeout_s=300)
    run_until(lambda: claude_pids([job.id]), 90, what="the run's CLI")
    run_until(lambda: requests_of(simulator, marker), 60, what="the run's request")
    assert client.get(job.id).worker == cut_off.worker_id
    other = workers(lease_ttl_s=4, heartbeat_s=1)

    proxy.freeze()
    frozen_at = time.monotonic()
    try:
        record = client.wait(job.id, timeout=120)  # the partition lasts until then, and at least FREEZE_S
        assert record.status == "succeeded", (record.attempts, record.error)
        assert record.worker == other.worker_id
        assert claude_pids([job.id]) == []
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen_at)))
    finally:
        proxy.thaw()

    run_until(cut_off.heartbeat_fresh, 60, what="the cut-off worker back")
    assert cut_off.alive()
    # Its own stale run ended long ago; whatever it might still write, it has tried by the time it stops.
    assert cut_off.stop(timeout=60) == 0
    after = client.get(job.id)
    assert after.model_dump() == record.model_dump()
    assert sorted(a.outcome or "" for a in after.attempts) == ["success", "worker_lost"]
    entries = requests_of(simulator, marker)
    assert len(entries) == 2  # the stalled run's request and the rerun's
    first, second = sorted(entries, key=lambda e: e["time"])
    assert first["ended"] <= second["time"], "two runs of the job were in flight at once"
