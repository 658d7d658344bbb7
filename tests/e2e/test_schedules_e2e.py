"""End to end: a schedule every second for 20 s, fired by two real `claudeq-worker` processes, one of them SIGKILLed
half-way: every tick fired exactly once (one job per tick, none twice, no gap), the jobs run and record their
schedule, and the schedule's counts say what fired."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e


def test_two_workers_fire_every_tick_once_and_a_sigkill_loses_none(
    client: Client, workers: WorkerFactory, settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    first, second = workers(), workers()
    client.add_schedule("every-second", prompt=f'[[sim: text "tick"]] scheduled {unique}', every_s=1)
    started = time.time()
    time.sleep(10)
    first.kill()  # SIGKILL: whatever it was doing between a submit and an advance is left to the other
    time.sleep(10)
    client.pause_schedule("every-second")
    stopped = time.time()
    time.sleep(1)  # a pass under way when it was paused may still fire the tick it read

    records = [r for r in client.list(limit=500) if not isinstance(r, Exception)]
    fired = [r for r in records if r.spec.metadata.get("schedule") == "every-second"]
    ticks = sorted(datetime.fromisoformat(str(r.spec.metadata["schedule_tick"])).timestamp() for r in fired)
    assert len(ticks) == len(set(ticks)), "a tick fired twice"
    assert ticks == [ticks[0] + i for i in range(len(ticks))], f"a tick was lost: {ticks}"
    assert 19 <= len(ticks) <= 21, (len(ticks), stopped - started)
    assert all(started < t <= stopped + 1 for t in ticks)
    [info] = client.schedules()
    assert info.fired == len(ticks) and info.missed == 0 and info.schedule.paused
    for record in fired[:3]:
        done = client.wait(record.id, timeout=120)
        assert done.status == "succeeded", done.error
    assert second.alive()
    client.remove_schedule("every-second")
