"""Schedules (claudeq/schedules.py) on fakeredis through the real Client: validation with the field and the reason,
cron ticks in a time zone, each tick fired exactly once by racing schedulers, a scheduler that died between submit
and advance, missed ticks under both policies, pause/resume/remove, tenants' names their own."""

from __future__ import annotations

import calendar
from typing import Any

import fakeredis
import pytest

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobSpec
from claudeq.producer.client import Client
from claudeq.schedules import ScheduleNotFound, ScheduleStore, schedule_from

T0 = 1_800_000_000.0  # a tick of every 1, 2, 5, 10 s schedule


@pytest.fixture
def client() -> Client:
    settings = Settings(_env_file=None, redis_url="redis://unused:6379/0", key_prefix="cqs:")  # type: ignore[call-arg]
    return Client(settings, redis_client=fakeredis.FakeRedis())


def store(client: Client) -> ScheduleStore:
    return ScheduleStore(client.store.redis, client.store.keys)


def submitter(client: Client, log: list[str]) -> Any:
    def submit(spec: JobSpec) -> str:
        handle = client.submit(spec)
        log.append(handle.id)
        return handle.id

    return submit


def scheduled_jobs(client: Client) -> list[tuple[str, str]]:
    records = [r for r in client.list(limit=1000) if not isinstance(r, Exception)]
    return sorted((str(r.spec.metadata["schedule"]), str(r.spec.metadata["schedule_tick"])) for r in records)


def test_a_bad_schedule_is_refused_with_the_field_and_the_reason(client: Client) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cron": "every day"}, "cron"),
        ({"cron": "0 2 * * *", "every_s": 60}, "exactly one of cron and every_s"),
        ({}, "exactly one of cron and every_s"),
        ({"every_s": 0}, "every_s"),
        ({"cron": "0 2 * * *", "tz": "Mars/Olympus"}, "tz"),
        ({"every_s": 5, "on_missed": "later"}, "on_missed"),
    ]
    for rule, named in cases:
        with pytest.raises(JobSpecError) as raised:
            client.add_schedule("nightly", prompt="p", **rule)
        assert named in str(raised.value), (rule, str(raised.value))
    with pytest.raises(JobSpecError, match="name"):
        client.add_schedule("no spaces", prompt="p", every_s=5)
    with pytest.raises(JobSpecError, match="max_turns"):
        client.add_schedule("nightly", prompt="p", every_s=5, max_turns=-1)  # the spec is checked as submit does
    client.add_schedule("nightly", prompt="p", every_s=5)
    with pytest.raises(JobSpecError, match="exists"):
        client.add_schedule("nightly", prompt="p", every_s=5)
    assert [i.schedule.name for i in client.schedules()] == ["nightly"]


def test_cron_ticks_are_read_in_the_schedules_time_zone() -> None:
    spec = JobSpec(prompt="p")
    berlin = schedule_from("n", spec, cron="0 2 * * *", tz="Europe/Berlin")
    utc_noon = calendar.timegm((2026, 7, 1, 12, 0, 0))
    assert berlin.next_tick(utc_noon) == calendar.timegm((2026, 7, 2, 0, 0, 0))  # 02:00 CEST is 00:00 UTC
    winter = calendar.timegm((2026, 1, 15, 12, 0, 0))
    assert berlin.next_tick(winter) == calendar.timegm((2026, 1, 16, 1, 0, 0))  # CET: 01:00 UTC
    every = schedule_from("n", spec, every_s=10)
    assert every.next_tick(T0) == T0 + 10 and every.next_tick(T0 + 3) == T0 + 10


def test_racing_schedulers_fire_each_tick_once(client: Client) -> None:
    client.add_schedule("often", prompt="tick", every_s=1)
    s = store(client)
    s.redis.zadd(client.store.keys.schedules_due, {"default/often": T0})
    submitted: list[str] = []
    for step in range(10):
        now = T0 + step + 0.1
        inner: list[Any] = []

        def slow_submit(spec: JobSpec, now: float = now, inner: list[Any] = inner) -> str:
            # Between the first scheduler's read of the due tick and its advance, a second one makes a whole pass.
            inner.extend(s.fire_due(submitter(client, submitted), now=now))
            return str(submitter(client, submitted)(spec))

        outer = s.fire_due(slow_submit, now=now)
        assert len(inner) == 1 and inner[0].tick == T0 + step and inner[0].job_id is not None
        assert outer == []  # its submit found the tick's job; its advance lost
        assert submitted[-2:] == [inner[0].job_id, inner[0].job_id]
    ticks = scheduled_jobs(client)
    assert len(ticks) == 10 and len(set(ticks)) == 10 and len(set(submitted)) == 10
    [info] = client.schedules()
    assert (info.fired, info.missed) == (10, 0)


def test_a_scheduler_that_died_after_submitting_leaves_the_tick_to_the_next(client: Client) -> None:
    client.add_schedule("often", prompt="tick", every_s=1)
    s = store(client)
    s.redis.zadd(client.store.keys.schedules_due, {"default/often": T0})
    dead = client.submit(s.get("often").job_spec(T0))  # submitted, then the worker was SIGKILLed: no advance
    fired = s.fire_due(submitter(client, []), now=T0 + 0.5)
    assert [(f.tick, f.job_id) for f in fired] == [(T0, dead.id)]  # the same job: the tick fired once
    assert len(scheduled_jobs(client)) == 1


def test_missed_ticks_are_skipped_or_run_once(client: Client) -> None:
    s = store(client)
    client.add_schedule("skips", prompt="tick", every_s=10, misfire_grace_s=5)
    client.add_schedule("catches-up", prompt="tick", every_s=10, misfire_grace_s=5, on_missed="run_once")
    for member in ("default/skips", "default/catches-up"):
        s.redis.zadd(client.store.keys.schedules_due, {member: T0})
    now = T0 + 95  # no scheduler ran for 95 s: ticks T0 .. T0+90 (10 of them) are due, all but the last late
    fired = {f.member: f for f in s.fire_due(submitter(client, []), now=now)}
    assert fired["default/skips"].job_id is None and fired["default/skips"].missed == 10
    assert fired["default/catches-up"].job_id is not None and fired["default/catches-up"].missed == 9
    due = dict(s.redis.zrange(client.store.keys.schedules_due, 0, -1, withscores=True))
    assert due == {b"default/skips": T0 + 100, b"default/catches-up": T0 + 100}  # the first tick after now
    assert scheduled_jobs(client) == [("catches-up", "2027-01-15T08:00:00+00:00")]
    infos = {i.schedule.name: i for i in client.schedules()}
    assert (infos["skips"].fired, infos["skips"].missed) == (0, 10)
    assert (infos["catches-up"].fired, infos["catches-up"].missed) == (1, 9)


def test_pause_resume_remove_and_tenants_names(client: Client) -> None:
    s = store(client)
    client.add_schedule("daily", prompt="for default", cron="0 3 * * *")
    client.add_schedule("daily", prompt="for team-a", cron="0 4 * * *", tenant="team-a")
    assert [(i.schedule.tenant, i.schedule.spec.prompt) for i in client.schedules()] == [
        ("default", "for default"),
        ("team-a", "for team-a"),
    ]
    assert [i.schedule.spec.prompt for i in client.schedules("team-a")] == ["for team-a"]
    client.pause_schedule("daily", "team-a")
    assert s.redis.zscore(client.store.keys.schedules_due, "team-a/daily") is None
    [paused] = client.schedules("team-a")
    assert paused.schedule.paused and paused.next_tick is None
    s.redis.hset(client.store.keys.schedule_stats("team-a/daily"), "fired", 3)
    client.resume_schedule("daily", "team-a")
    [resumed] = client.schedules("team-a")
    assert resumed.fired == 3  # pausing and resuming keep the counts
    assert not resumed.schedule.paused and resumed.next_tick is not None
    client.remove_schedule("daily")
    assert [i.schedule.tenant for i in client.schedules()] == ["team-a"]
    with pytest.raises(ScheduleNotFound):
        client.remove_schedule("daily")
    with pytest.raises(ScheduleNotFound):
        client.pause_schedule("daily", "team-b")


def test_a_spec_submit_refuses_is_a_refused_tick_not_a_stuck_schedule(client: Client) -> None:
    s = store(client)
    client.add_schedule("refused", prompt="tick", every_s=1)
    s.redis.zadd(client.store.keys.schedules_due, {"default/refused": T0})

    def refuse(spec: JobSpec) -> str:
        raise JobSpecError([("cwd", "outside the workspace roots")])

    s.redis.hset(client.store.keys.schedules, "default/broken", "{not json")
    s.redis.zadd(client.store.keys.schedules_due, {"default/broken": T0 - 1})
    # The unreadable one is taken off the due set (its error kept), not fired; the other goes on.
    broken, fired = s.fire_due(refuse, now=T0 + 0.1)
    assert broken.paused and broken.member == "default/broken" and broken.error is not None
    assert fired.job_id is None and fired.error is not None and "cwd" in fired.error
    assert s.redis.zscore(client.store.keys.schedules_due, "default/refused") == T0 + 1  # moved on
    assert s.redis.zscore(client.store.keys.schedules_due, "default/broken") is None
    [info] = client.schedules()
    assert info.refused == 1 and info.last_error is not None and "cwd" in info.last_error
