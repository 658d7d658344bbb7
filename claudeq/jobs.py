"""JobStore: the job records, their events and their status transitions in Redis (one class, one concern)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis
from pydantic import ValidationError

from claudeq import job_scripts as scripts
from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.keys import Keys
from claudeq.models import (
    TERMINAL,
    Attempt,
    Event,
    JobError,
    JobRecord,
    JobResult,
    JobSpec,
    JobStatus,
    utcnow,
)

#: Hash fields stored as JSON documents; the rest are plain strings.
_JSON_FIELDS = ("spec", "attempts", "result", "error")
_TIME_FIELDS = ("created_at", "started_at", "finished_at", "ready_at")
_STR_FIELDS = ("account", "worker", "session_id")

ClaimResult = Literal["ok", "busy", "orphan", "missing", "queued", "deferred", "succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: `ok` with a fencing token, or why the delivery is to be dropped."""

    result: str
    fence: int = 0
    first: bool = False  # the job's first claim ever: its queue wait ends now

    @property
    def ok(self) -> bool:
        """Whether this worker now owns the run."""
        return self.result == "ok"


def _encode(field: str, value: Any) -> str:
    if field in _JSON_FIELDS:
        if value is None:
            return ""
        if isinstance(value, list):
            return json.dumps([v.model_dump(mode="json") for v in value])
        return json.dumps(value.model_dump(mode="json"))
    if isinstance(value, datetime):
        return value.isoformat()
    return "" if value is None else str(value)


def encode_fields(**fields: Any) -> list[str]:
    """Flatten record fields into Redis hash field/value pairs."""
    out: list[str] = []
    for field, value in fields.items():
        out += [field, _encode(field, value)]
    return out


class JobStore:
    """Reads and writes job state. Every status change is one atomic Lua script (producer/scripts.py)."""

    def __init__(self, client: redis.Redis, keys: Keys, *, result_ttl_s: int, events_maxlen: int) -> None:
        self.redis = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self.events_maxlen = events_maxlen
        self._create = client.register_script(scripts.CREATE)
        self._claim = client.register_script(scripts.CLAIM)
        self._heartbeat = client.register_script(scripts.HEARTBEAT)
        self._write = client.register_script(scripts.WRITE)
        self._promote = client.register_script(scripts.PROMOTE)
        self._cancel = client.register_script(scripts.CANCEL)
        self._recover = client.register_script(scripts.RECOVER)
        self._resend = client.register_script(scripts.RESEND)

    # ---- create and read -------------------------------------------------------------------------------------

    def create(self, record: JobRecord) -> tuple[str, bool]:
        """Write a new `queued` record; with an idempotency key, return the existing id instead. -> (id, created)."""
        idem = record.spec.idempotency_key
        fields = encode_fields(
            status=record.status,
            spec=record.spec,
            attempts=record.attempts,
            created_at=record.created_at,
            fence=0,
            v=1,
        )
        now = time.time()
        created, job_id = self._create(
            keys=[
                self.keys.job(record.id),
                self.keys.jobs,
                self.keys.queued,
                self.keys.idem(idem) if idem else "",
            ],
            args=[
                record.id,
                int(record.created_at.timestamp() * 1000),
                now,
                self.keys.job(""),
                *fields,
            ],
        )
        return _text(job_id), bool(created)

    def get(self, job_id: str) -> JobRecord:
        """The record of `job_id`; JobNotFound or RecordUnreadable when it cannot be had."""
        raw = self.redis.hgetall(self.keys.job(job_id))
        if not raw:
            raise JobNotFound(job_id)
        return parse_record(job_id, {_text(k): _text(v) for k, v in raw.items()})

    def status(self, job_id: str) -> JobStatus | None:
        """Only the status (cheap), or None when the job does not exist."""
        value = self.redis.hget(self.keys.job(job_id), "status")
        return None if value is None else _text(value)  # type: ignore[return-value]

    def list_jobs(self, status: str | None = None, limit: int = 50) -> list[JobRecord | RecordUnreadable]:
        """Newest first; unreadable records are returned as their error, not raised."""
        out: list[JobRecord | RecordUnreadable] = []
        start, page = 0, max(limit * 2, 100)
        while len(out) < limit:
            ids = [_text(i) for i in self.redis.zrevrange(self.keys.jobs, start, start + page - 1)]
            if not ids:
                break
            pipe = self.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            for job_id, raw in zip(ids, pipe.execute(), strict=True):
                if not raw:
                    continue
                fields = {_text(k): _text(v) for k, v in raw.items()}
                if status is not None and fields.get("status") != status:
                    continue
                try:
                    out.append(parse_record(job_id, fields))
                except RecordUnreadable as exc:
                    out.append(exc)
                if len(out) >= limit:
                    break
            start += page
        return out

    def count_by_status(self) -> dict[str, int]:
        """Jobs per status among those still retained."""
        counts: dict[str, int] = {}
        for chunk in _chunks(self.redis.zrange(self.keys.jobs, 0, -1), 500):
            pipe = self.redis.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hget(self.keys.job(_text(job_id)), "status")
            for value in pipe.execute():
                if value is not None:
                    counts[_text(value)] = counts.get(_text(value), 0) + 1
        return counts

    # ---- the run's side: claim, heartbeat, fenced writes -------------------------------------------------------

    def claim(self, job_id: str, worker: str, lease_ttl_s: float) -> Claim:
        """Atomically take a queued job: status running, a lease with a new fencing token."""
        reply = self._claim(
            keys=[self.keys.job(job_id), self.keys.lease(job_id), self.keys.queued, self.keys.running],
            args=[job_id, worker, int(lease_ttl_s * 1000), utcnow().isoformat()],
        )
        first = len(reply) > 2 and int(reply[2]) == 1
        return Claim(_text(reply[0]), int(reply[1]), first)

    def heartbeat(self, job_id: str, worker: str, fence: int, lease_ttl_s: float) -> bool:
        """Extend the lease; False when it is no longer ours (expired or taken over)."""
        return bool(
            self._heartbeat(keys=[self.keys.lease(job_id)], args=[f"{worker}|{fence}", int(lease_ttl_s * 1000)])
        )

    def write(self, job_id: str, fence: int, status: JobStatus | None = None, score: float = 0, **fields: Any) -> bool:
        """Write fields (and optionally move status) only while `fence` still holds the job. False = stale."""
        if status == "deferred" and "ready_at" not in fields:
            raise ValueError("a deferred job needs ready_at")
        if status in TERMINAL and "finished_at" not in fields:
            fields["finished_at"] = utcnow()
        if status == "queued" and not score:
            score = time.time()
        if status == "deferred":
            score = fields["ready_at"].timestamp()
        return bool(
            self._write(
                keys=[
                    self.keys.job(job_id),
                    self.keys.lease(job_id),
                    self.keys.queued,
                    self.keys.running,
                    self.keys.deferred,
                    self.keys.events(job_id),
                    self.keys.cancel(job_id),
                ],
                args=[job_id, fence, status or "", self.result_ttl_s, score, *encode_fields(**fields)],
            )
        )

    # ---- background loops: promoter, reconciler ----------------------------------------------------------------

    def due_deferred(self, now: float | None = None, limit: int = 100) -> list[str]:
        """Deferred job ids whose ready time has come."""
        now = time.time() if now is None else now
        return [_text(i) for i in self.redis.zrangebyscore(self.keys.deferred, "-inf", now, start=0, num=limit)]

    def promote(self, job_id: str, now: float | None = None, force: bool = False) -> bool:
        """Claim one deferred job back to `queued` (atomic ZREM, so only one caller wins); the caller sends it."""
        due = "+inf" if force else str(time.time() if now is None else now)
        return bool(
            self._promote(keys=[self.keys.deferred, self.keys.job(job_id), self.keys.queued], args=[job_id, due])
        )

    def forget_running(self, job_id: str) -> None:
        """Drop a job id from the running index (its record is gone)."""
        self.redis.srem(self.keys.running, job_id)

    def fence_of(self, job_id: str) -> int | None:
        """The job's fencing token read directly (works when the record itself cannot be parsed)."""
        value = self.redis.hget(self.keys.job(job_id), "fence")
        return None if value is None else int(value)

    def running_ids(self) -> list[str]:
        """Ids of jobs marked running."""
        return [_text(i) for i in self.redis.smembers(self.keys.running)]

    def lease_alive(self, job_id: str) -> bool:
        """Whether the job's run lease still exists."""
        return bool(self.redis.exists(self.keys.lease(job_id)))

    def recover(self, job_id: str, fence: int, attempts: list[Attempt] | None) -> bool:
        """A running job whose lease expired goes back to `queued` with `attempts` (None: leave them as they are,
        e.g. when the record cannot be parsed); False if anything moved."""
        return bool(
            self._recover(
                keys=[self.keys.job(job_id), self.keys.lease(job_id), self.keys.running, self.keys.queued],
                args=[job_id, fence, time.time(), *(encode_fields(attempts=attempts) if attempts is not None else [])],
            )
        )

    def stale_queued(self, older_than_s: float, limit: int = 100) -> list[str]:
        """Queued job ids whose message was sent more than `older_than_s` ago."""
        cutoff = time.time() - older_than_s
        return [_text(i) for i in self.redis.zrangebyscore(self.keys.queued, "-inf", cutoff, start=0, num=limit)]

    def claim_resend(self, job_id: str, older_than_s: float) -> bool:
        """Claim the re-send of an unclaimed queued job (once across all workers)."""
        now = time.time()
        return bool(
            self._resend(keys=[self.keys.queued, self.keys.job(job_id)], args=[job_id, now - older_than_s, now])
        )

    def mark_sent(self, job_id: str) -> None:
        """Record that a message for this queued job was just sent."""
        self.redis.zadd(self.keys.queued, {job_id: time.time()}, xx=True)

    def trim_index(self) -> int:
        """Drop ids of expired jobs from the `jobs` index; returns how many."""
        cutoff_ms = (time.time() - self.result_ttl_s) * 1000
        old = [_text(i) for i in self.redis.zrangebyscore(self.keys.jobs, "-inf", cutoff_ms, start=0, num=1000)]
        gone = [job_id for job_id in old if not self.redis.exists(self.keys.job(job_id))]
        if gone:
            self.redis.zrem(self.keys.jobs, *gone)
        return len(gone)

    # ---- cancel ----------------------------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "cancelled by request") -> str:
        """Cancel: a queued/deferred job at once; a running one gets the flag and a wake-up. -> what happened."""
        error = JobError(kind="cancelled", message=reason).model_dump_json()
        result = _text(
            self._cancel(
                keys=[
                    self.keys.job(job_id),
                    self.keys.deferred,
                    self.keys.queued,
                    self.keys.cancel(job_id),
                    self.keys.events(job_id),
                ],
                args=[
                    job_id,
                    utcnow().isoformat(),
                    self.result_ttl_s,
                    error,
                    Event(type="cancelled", data={"reason": reason}).model_dump_json(),
                    self.events_maxlen,
                ],
            )
        )
        if result == "running":
            self.redis.publish(self.keys.cancel_channel, job_id)
        return result

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel flag is set for the job."""
        return bool(self.redis.exists(self.keys.cancel(job_id)))

    # ---- events ----------------------------------------------------------------------------------------------

    def append_event(self, job_id: str, event: Event) -> str:
        """Add an event to the job's stream (trimmed to about `events_maxlen`)."""
        entry_id = self.redis.xadd(
            self.keys.events(job_id),
            {"event": event.model_dump_json()},
            maxlen=self.events_maxlen,
            approximate=True,
        )
        return _text(entry_id)

    def read_events(
        self, job_id: str, after: str = "0-0", block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, Event]]:
        """Events after entry id `after`; with `block_ms`, wait that long for new ones."""
        entries: Any
        if block_ms is None:
            start = f"({after}" if after != "0-0" else "-"
            entries = self.redis.xrange(self.keys.events(job_id), min=start, count=count)
        else:
            res: Any = self.redis.xread({self.keys.events(job_id): after}, count=count, block=block_ms)
            entries = res[0][1] if res else []
        out: list[tuple[str, Event]] = []
        for entry_id, fields in entries:
            payload = fields.get(b"event") or fields.get("event") or b"{}"
            try:
                out.append((_text(entry_id), Event.model_validate_json(payload)))
            except ValidationError:
                out.append((_text(entry_id), Event(type="unreadable", data={"raw": _text(payload)[:200]})))
        return out

    def follow_events(self, job_id: str, poll_ms: int = 1000) -> Iterator[Event]:
        """Yield events as they come until the job is finished and the stream is drained."""
        after = "0-0"
        while True:
            batch = self.read_events(job_id, after=after, block_ms=poll_ms)
            for entry_id, event in batch:
                after = entry_id
                yield event
            if not batch:
                status = self.status(job_id)
                if status is None or status in TERMINAL:
                    for entry_id, event in self.read_events(job_id, after=after):
                        after = entry_id
                        yield event
                    return


def parse_record(job_id: str, fields: dict[str, str]) -> JobRecord:
    """Build a JobRecord from the hash fields; RecordUnreadable when they do not parse."""
    try:
        data: dict[str, Any] = {
            "id": job_id,
            "status": fields["status"],
            "fence": int(fields.get("fence") or 0),
        }
        for name in _JSON_FIELDS:
            if fields.get(name):
                data[name] = json.loads(fields[name])
        for name in _TIME_FIELDS + _STR_FIELDS:
            if fields.get(name):
                data[name] = fields[name]
        return JobRecord.model_validate(data)
    except (KeyError, ValueError, ValidationError) as exc:
        detail = str(exc).splitlines()[0][:300]
        raise RecordUnreadable(job_id, detail) from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = ["Claim", "JobResult", "JobSpec", "JobStore", "parse_record"]
