"""Schedules: a job spec submitted on a cron expression (croniter) or every N seconds, by the fleet itself.

A schedule lives in Redis (`schedules`: `{tenant}/{name}` -> its JSON; `schedules-due`: the same member -> its next
tick, epoch s). Every worker runs the scheduler loop (`fire_due`); a tick is fired **exactly once** however many
workers see it: the job is submitted with the idempotency key `schedule:{name}:{tick}` (one job per tick whoever
submits it, and a worker killed between submitting and advancing leaves the tick to the next worker, which finds the
job already there), then the schedule is advanced with a compare-and-set on its due score (`ADVANCE`: only the
first advance of a tick counts). A tick later than `misfire_grace_s` is missed (no worker was up): `on_missed =
"skip"` fires nothing for the ticks missed, `"run_once"` fires one job for the oldest of them; either way the next
tick is the first after now. Names are each tenant's own. Why and how: docs/architecture.md#schedules.
"""

from __future__ import annotations

import builtins
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from claudeq.config.tenants import DEFAULT_TENANT
from claudeq.errors import ClaudeqError, JobSpecError
from claudeq.keys import Keys, text
from claudeq.lua import script
from claudeq.models import JobSpec, utcnow

#: A schedule's name: letters, digits, `.`, `_`, `-`.
SCHEDULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: The metadata keys a fired job records its schedule and tick under.
SCHEDULE_KEY, TICK_KEY = "schedule", "schedule_tick"

#: Advance a schedule past the tick it was due at, only if that is still its due tick: one advance per tick.
ADVANCE = script("schedule/advance.lua")


class Fired(NamedTuple):
    """A tick a scheduler advanced: the job it submitted (None: missed or refused), the ticks it counts missed, and
    why submit refused the spec."""

    member: str
    tick: float
    job_id: str | None
    missed: int
    error: str | None


class ScheduleNotFound(ClaudeqError):
    """No schedule of that name (for that tenant)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named {name!r}")


class Schedule(BaseModel):
    """A job spec fired on a cron expression or an interval."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SCHEDULE_NAME.pattern)
    spec: JobSpec
    cron: str | None = Field(default=None, description="A cron expression (5 fields; croniter's syntax).")
    every_s: int | None = Field(default=None, ge=1, description="Or: fire every this many seconds.")
    tz: str = Field(default="UTC", description="The time zone the cron expression is read in (IANA name).")
    on_missed: Literal["skip", "run_once"] = "skip"
    misfire_grace_s: float = Field(default=60.0, ge=0, description="A tick later than this is missed.")
    paused: bool = False
    created_at: datetime = Field(default_factory=utcnow)

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Berlin)") from None
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (e.g. '0 2 * * *')")
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> Schedule:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("give exactly one of cron and every_s")
        return self

    @property
    def tenant(self) -> str:
        return self.spec.tenant

    def next_tick(self, after: float) -> float:
        """The first tick strictly after `after` (epoch s)."""
        if self.every_s is not None:
            return float((math.floor(after / self.every_s) + 1) * self.every_s)
        from croniter import croniter

        assert self.cron is not None
        start = datetime.fromtimestamp(after, ZoneInfo(self.tz))
        return float(croniter(self.cron, start).get_next(float))

    def job_spec(self, tick: float) -> JobSpec:
        """The spec of the job fired for `tick`: one idempotency key per tick, the schedule and tick recorded."""
        metadata = {**self.spec.metadata, SCHEDULE_KEY: self.name, TICK_KEY: _iso(tick)}
        return self.spec.model_copy(
            update={"idempotency_key": f"schedule:{self.name}:{int(tick)}", "metadata": metadata}
        )


class ScheduleInfo(BaseModel):
    """A schedule as listed: the schedule, its next tick and what it fired."""

    schedule: Schedule
    next_tick: datetime | None
    fired: int = 0
    missed: int = 0
    refused: int = 0
    last_job_id: str | None = None
    last_error: str | None = None


class ScheduleStore:
    """Schedules in Redis, as producers (add, list, pause, resume, remove) and the scheduler loop use them."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self._advance = client.register_script(ADVANCE)

    @staticmethod
    def member(tenant: str, name: str) -> str:
        return f"{tenant}/{name}"

    def add(self, schedule: Schedule, now: float | None = None, replace: bool = False) -> Schedule:
        """Store a schedule and its first tick; an existing one of that name is an error unless `replace`."""
        member = self.member(schedule.tenant, schedule.name)
        if not replace and self.redis.hexists(self.keys.schedules, member):
            raise JobSpecError([("name", f"a schedule named {schedule.name!r} exists (remove it first)")])
        now = time.time() if now is None else now
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.schedules, member, schedule.model_dump_json())
        if not replace:
            pipe.delete(self.keys.schedule_stats(member))  # a new schedule of an old name starts its counts afresh
        if schedule.paused:
            pipe.zrem(self.keys.schedules_due, member)
        else:
            pipe.zadd(self.keys.schedules_due, {member: schedule.next_tick(now)})
        pipe.execute()
        return schedule

    def get(self, name: str, tenant: str = DEFAULT_TENANT) -> Schedule:
        raw = self.redis.hget(self.keys.schedules, self.member(tenant, name))
        if raw is None:
            raise ScheduleNotFound(name)
        return Schedule.model_validate_json(raw)

    def list(self, tenant: str | None = None) -> list[ScheduleInfo]:
        """Every schedule (of one tenant, if given), by name."""
        out: list[ScheduleInfo] = []
        for raw_member, raw in sorted(self.redis.hgetall(self.keys.schedules).items()):
            member = text(raw_member)
            owner = member.split("/", 1)[0]
            if tenant is not None and owner != tenant:
                continue
            try:
                schedule = Schedule.model_validate_json(raw)
            except ValidationError:
                continue
            score = self.redis.zscore(self.keys.schedules_due, member)
            stats = {text(k): text(v) for k, v in self.redis.hgetall(self.keys.schedule_stats(member)).items()}
            out.append(
                ScheduleInfo(
                    schedule=schedule,
                    next_tick=datetime.fromtimestamp(score, UTC) if score is not None else None,
                    fired=int(stats.get("fired", 0)),
                    missed=int(stats.get("missed", 0)),
                    refused=int(stats.get("refused", 0)),
                    last_job_id=stats.get("last_job_id"),
                    last_error=stats.get("last_error"),
                )
            )
        return out

    def pause(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        schedule = self.get(name, tenant)
        self.add(schedule.model_copy(update={"paused": True}), replace=True)

    def resume(self, name: str, tenant: str = DEFAULT_TENANT, now: float | None = None) -> None:
        """Fire again from the next tick after now (ticks while paused are not made up)."""
        schedule = self.get(name, tenant)
        self.add(schedule.model_copy(update={"paused": False}), now=now, replace=True)

    def remove(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        member = self.member(tenant, name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.schedules, member)
        pipe.zrem(self.keys.schedules_due, member)
        pipe.delete(self.keys.schedule_stats(member))
        removed, _, _ = pipe.execute()
        if not removed:
            raise ScheduleNotFound(name)

    # ---- the scheduler ---------------------------------------------------------------------------------------

    def fire_due(
        self, submit: Callable[[JobSpec], str], now: float | None = None, limit: int = 100
    ) -> builtins.list[Fired]:
        """Fire every due tick (each exactly once across callers); `submit(spec) -> job id`. -> what this caller
        advanced (a tick another caller advanced first is not in it, though this caller's submit found its job)."""
        now = time.time() if now is None else now
        due = cast(
            builtins.list[tuple[Any, float]],
            self.redis.zrangebyscore(self.keys.schedules_due, "-inf", now, start=0, num=limit, withscores=True),
        )
        done: builtins.list[Fired] = []
        for raw_member, score in due:
            tick = float(score)
            member = text(raw_member)
            raw = self.redis.hget(self.keys.schedules, member)
            if raw is None:
                self.redis.zrem(self.keys.schedules_due, member)
                continue
            try:
                schedule = Schedule.model_validate_json(raw)
            except ValidationError:  # written by something else: it cannot fire, and must not hold up the rest
                self.redis.zrem(self.keys.schedules_due, member)
                continue
            late = now - tick > schedule.misfire_grace_s
            job_id: str | None = None
            error: str | None = None
            if not late or schedule.on_missed == "run_once":
                try:
                    job_id = submit(schedule.job_spec(tick))  # idempotent per tick: a second submit finds the job
                except redis.RedisError:
                    raise  # transient: the tick stays due, the next pass submits it
                except ClaudeqError as exc:  # e.g. the workers' policy refuses its cwd: the tick is refused
                    error = str(exc)
            following = schedule.next_tick(now if late else tick)
            if int(self._advance(keys=[self.keys.schedules_due], args=[member, repr(tick), repr(following)])):
                stats = self.keys.schedule_stats(member)
                pipe = self.redis.pipeline(transaction=False)
                missed = _ticks_between(schedule, tick, now) - (job_id is not None) if late else 0
                if job_id is not None:
                    pipe.hincrby(stats, "fired", 1)
                    pipe.hset(stats, "last_job_id", job_id)
                if error is not None:
                    pipe.hincrby(stats, "refused", 1)
                    pipe.hset(stats, "last_error", error[:500])
                if missed:
                    pipe.hincrby(stats, "missed", missed)
                pipe.execute()
                done.append(Fired(member, tick, job_id, missed, error))
        return done


def _ticks_between(schedule: Schedule, first: float, now: float) -> int:
    """How many ticks from `first` up to `now` (at most 10,000 counted)."""
    count, tick = 0, first
    while tick <= now and count < 10_000:
        count += 1
        tick = schedule.next_tick(tick)
    return count


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def schedule_from(name: str, spec: JobSpec, **rule: Any) -> Schedule:
    """A Schedule, or JobSpecError naming the field and the reason."""
    try:
        return Schedule.model_validate({"name": name, "spec": spec, **rule})
    except ValidationError as exc:
        raise JobSpecError(
            [(".".join(str(p) for p in e["loc"]) or "schedule", e["msg"]) for e in exc.errors()]
        ) from None


__all__ = ["Fired", "Schedule", "ScheduleInfo", "ScheduleNotFound", "ScheduleStore", "schedule_from"]
