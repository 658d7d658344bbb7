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
from dataclasses import dataclass
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
from claudeq.script_args import ScriptArgs, key

#: A schedule's name: letters, digits, `.`, `_`, `-`.
SCHEDULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: The metadata keys a fired job records its schedule and tick under.
SCHEDULE_KEY, TICK_KEY = "schedule", "schedule_tick"

#: Advance a schedule past the tick it was due at, only if that is still its due tick: one advance per tick.
ADVANCE = script("schedule/advance.lua")


@dataclass(frozen=True, kw_only=True)
class AdvanceArgs(ScriptArgs):
    """ADVANCE's arguments (claudeq/script_args.py)."""

    SCRIPT = "schedule/advance.lua"
    schedules_due: str = key()
    member: str
    tick: str
    following: str


#: The longest interval a schedule may fire at (a year and a day): its ticks stay within what a date can hold.
MAX_EVERY_S = 366 * 86400
#: A cron expression must have a tick within this many years of now (croniter looks no further).
CRON_HORIZON_YEARS = 5
#: The five fields of a cron expression, by position (named in a refusal).
CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")


def bad_cron_field(expression: str) -> str | None:
    """Which of the (first five) fields of a cron expression croniter refuses, said by its name; None when none."""
    from croniter import croniter

    for index, field in enumerate(expression.split()[: len(CRON_FIELDS)]):
        probe = ["*"] * len(CRON_FIELDS)
        probe[index] = field
        if not croniter.is_valid(" ".join(probe)):
            return f"the {CRON_FIELDS[index]} field {field!r} of {expression!r} is not valid"
    return None


class Fired(NamedTuple):
    """A tick a scheduler advanced: the job it submitted (None: missed or refused), the ticks it counts missed, and
    why submit refused the spec; or a schedule the scheduler could not handle at all (`paused`: it is paused with
    that error, so the rest go on)."""

    member: str
    tick: float
    job_id: str | None
    missed: int
    error: str | None
    paused: bool = False


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
    every_s: int | None = Field(
        default=None, ge=1, description="Or: fire every this many seconds (at most a year and a day: MAX_EVERY_S)."
    )
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
            bad = bad_cron_field(value)
            if bad is not None:
                raise ValueError(bad)
            raise ValueError(f"{value!r} is not a cron expression (e.g. '0 2 * * *')")
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> Schedule:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("give exactly one of cron and every_s")
        return self

    def rule_problems(self, now: float) -> builtins.list[tuple[str, str]]:
        """What `add` refuses in the rule beyond its form (a stored schedule from before still loads, and the
        scheduler pauses it if it cannot be handled): five cron fields, each valid, a tick within the horizon; an
        interval of at most MAX_EVERY_S."""
        if self.every_s is not None:
            if self.every_s > MAX_EVERY_S:
                return [("every_s", f"{self.every_s} s is more than a year and a day ({MAX_EVERY_S} s)")]
            return []

        assert self.cron is not None
        fields = self.cron.split()
        if len(fields) != len(CRON_FIELDS):
            reason = (
                f"{self.cron!r} has {len(fields)} fields; give 5 (minute hour day-of-month month day-of-week, "
                "e.g. '0 2 * * *'): seconds and years are not supported"
            )
            return [("cron", reason)]
        bad = bad_cron_field(self.cron)
        if bad is not None:
            return [("cron", bad)]
        try:
            self.next_tick(now)
        except ValueError:
            return [("cron", f"{self.cron!r} has no tick within {CRON_HORIZON_YEARS} years (in {self.tz})")]
        return []

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
        # croniter's errors (no date found, out of range) are ValueErrors: the caller names the schedule.
        return float(croniter(self.cron, start, max_years_between_matches=CRON_HORIZON_YEARS).get_next(float))

    def fires_per_hour(self, now: float) -> float:
        """About how often it fires: every_s's rate, or a cron expression's ticks over the next day, per hour."""
        if self.every_s is not None:
            return 3600 / self.every_s
        count, tick, end = 0, now, now + 86400
        while count <= 1440:  # five fields: at most one tick a minute
            tick = self.next_tick(tick)
            if tick > end:
                break
            count += 1
        return count / 24

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
    failed: int = 0  # times the scheduler could not handle it (it was paused then: `last_error` says why)
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
                    next_tick=_when(score),
                    fired=int(stats.get("fired", 0)),
                    missed=int(stats.get("missed", 0)),
                    refused=int(stats.get("refused", 0)),
                    failed=int(stats.get("failed", 0)),
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
            member = text(raw_member)
            try:
                fired = self._fire(member, float(score), now, submit)
            except redis.RedisError:
                raise  # transient: the tick stays due, the next pass tries again
            except Exception as exc:  # this schedule's own fault: it must not hold up the rest (nor every pass)
                fired = self._pause_broken(member, float(score), f"{type(exc).__name__}: {exc}")
            if fired is not None:
                done.append(fired)
        return done

    def _fire(self, member: str, tick: float, now: float, submit: Callable[[JobSpec], str]) -> Fired | None:
        """Fire one due tick of `member` and advance it (None: removed meanwhile, or another caller advanced it)."""
        raw = self.redis.hget(self.keys.schedules, member)
        if raw is None:
            self.redis.zrem(self.keys.schedules_due, member)
            return None
        schedule = Schedule.model_validate_json(raw)  # a schedule that does not parse is paused by the caller
        late = now - tick > schedule.misfire_grace_s
        job_id: str | None = None
        error: str | None = None
        if not late or schedule.on_missed == "run_once":
            try:
                job_id = submit(schedule.job_spec(tick))  # idempotent per tick: a second submit finds the job
            except redis.RedisError:
                raise
            except ClaudeqError as exc:  # e.g. the workers' policy refuses its cwd: the tick is refused
                error = str(exc)
        try:
            following = schedule.next_tick(now if late else tick)
        except ValueError as exc:
            raise ValueError(f"cannot compute its next tick ({exc})") from None
        args = AdvanceArgs(
            schedules_due=self.keys.schedules_due, member=member, tick=repr(tick), following=repr(following)
        )
        if not int(self._advance(keys=args.keys(), args=args.argv())):
            return None
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
        return Fired(member, tick, job_id, missed, error)

    def _pause_broken(self, member: str, tick: float, error: str) -> Fired | None:
        """Take a schedule the scheduler cannot handle off the due set (only if still due at `tick`: once across
        schedulers), mark it paused and keep why where `schedule list` shows it; None when another did it."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.zscore(self.keys.schedules_due, member)
        pipe.hget(self.keys.schedules, member)
        score, raw = pipe.execute()
        if score is None or float(score) != tick:
            return None
        if not self.redis.zrem(self.keys.schedules_due, member):
            return None
        try:
            paused = Schedule.model_validate_json(raw).model_copy(update={"paused": True}).model_dump_json()
        except (ValidationError, ValueError, TypeError):
            paused = None  # not a schedule this version can read: off the due set, kept as it was for an operator
        stats = self.keys.schedule_stats(member)
        pipe = self.redis.pipeline(transaction=False)
        if paused is not None:
            pipe.hset(self.keys.schedules, member, paused)
        pipe.hincrby(stats, "failed", 1)
        pipe.hset(stats, "last_error", error[:500])
        pipe.execute()
        return Fired(member, tick, None, 0, error, paused=True)


def _when(score: float | None) -> datetime | None:
    """A due score as a time; None for none, or for one past what a date can hold."""
    if score is None:
        return None
    try:
        return datetime.fromtimestamp(score, UTC)
    except (OverflowError, OSError, ValueError):
        return None


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
        schedule = Schedule.model_validate({"name": name, "spec": spec, **rule})
    except ValidationError as exc:
        # The rule's own checks (one of the two; a tick within the horizon) are about the rule it was given.
        rule_field = "cron" if rule.get("cron") is not None else "every_s"
        raise JobSpecError(
            [
                (".".join(str(p) for p in e["loc"]) or rule_field, str(e["msg"]).removeprefix("Value error, "))
                for e in exc.errors()
            ]
        ) from None
    problems = schedule.rule_problems(time.time())
    if problems:
        raise JobSpecError(problems)
    return schedule


__all__ = ["Fired", "Schedule", "ScheduleInfo", "ScheduleNotFound", "ScheduleStore", "schedule_from"]
