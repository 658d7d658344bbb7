"""Redis reachable only through a proxy that freezes (connections open, no byte moves): the worker's own monotonic
deadline, independent of any Redis call, stops the run (its CLI SIGKILLed) before its lease can expire — so another
worker taking the job over never makes two runs of it at once. On main the heartbeat sat in a Redis call and the
CLI outlived the lease."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until
from tests.support.tcp_proxy import FreezableProxy

pytestmark = pytest.mark.e2e


@pytest.fixture
def proxy(settings: Settings) -> Iterator[FreezableProxy]:
    url = redis.connection.parse_url(settings.redis_url)
    server = FreezableProxy(str(url.get("host", "127.0.0.1")), int(url.get("port", 6379)))
    yield server
    server.close()


def test_a_run_cut_off_from_redis_stops_before_its_lease_expires(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, proxy: FreezableProxy
) -> None:
    assert settings.redis_url.startswith("redis://127.0.0.1") and "@" not in settings.redis_url
    worker = workers(
        redis_url=proxy.url(int(settings.redis_url.rsplit("/", 1)[-1] or 0)), lease_ttl_s=4, heartbeat_s=1, wait=False
    )
    worker.wait_ready(90)
    job = client.submit(prompt="[[sim: stall 60]] a long run", idle_timeout_s=120)
    run_until(lambda: claude_pids([job.id]), 60, what="the run's CLI")
    running = Keys(settings.key_prefix).running

    def lease_left() -> float:
        expiry = redis_client.zscore(running, job.id)
        return -1.0 if expiry is None else expiry - time.time()

    run_until(lambda: lease_left() > 3, 10, 0.02, what="a fresh lease")  # just renewed

    proxy.freeze()
    frozen_at = time.monotonic()
    while lease_left() > 0:
        assert time.monotonic() - frozen_at < 15, "the lease never expired"
        time.sleep(0.02)
    alive_at_expiry = claude_pids([job.id])
    proxy.thaw()

    assert alive_at_expiry == [], f"the run was still going when its lease expired: {worker.log()[-2500:]}"
