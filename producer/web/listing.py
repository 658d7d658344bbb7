"""The job list of `claudeq web`: filters over the existing indexes, read a bounded stretch at a time.

A page walks one index newest first — a conversation's own jobs, a tenant's index (`Keys.tenant_index`) or the
fleet's `jobs` (creation time in ms), from the creation time of `since` or of the parent job on — and reads at most
`max_scan` entries of it per request, however rare the filter: a filter nothing matches answers as fast as one
everything matches, and says how far back it looked. The cursor is where the walk stopped (docs/web.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from claudeq.errors import ClaudeqError, RecordUnreadable
from claudeq.keys import text
from claudeq.models import PARENT_JOB_KEY, JobRecord
from claudeq.script_calls import run_call

from ...config.tenants import DEFAULT_TENANT
from ..client import Client

#: Index entries read per round trip, and at most per page by default.
CHUNK = 250
MAX_SCAN = 2_000


@dataclass(frozen=True)
class JobFilter:
    """What the list shows; every field optional (None: any)."""

    status: str | None = None
    tenant: str | None = None
    queue: str | None = None
    account: str | None = None
    conversation: str | None = None
    parent: str | None = None
    since_ms: int | None = None

    def matches(self, record: JobRecord, default_queue: str) -> bool:
        spec = record.spec
        return (
            (self.status is None or record.status == self.status)
            and (self.tenant is None or spec.tenant == self.tenant)
            and (self.queue is None or (spec.queue or default_queue) == self.queue)
            and (self.account is None or record.account == self.account or spec.account == self.account)
            and (self.conversation is None or spec.conversation == self.conversation)
            and (self.parent is None or record.parent_job_id == self.parent)
            and (self.since_ms is None or record.created_at.timestamp() * 1000 >= self.since_ms)
        )

    def light(self) -> bool:
        """Whether the fields a record is listed by rule most entries out (then they are read first, alone)."""
        return any(v is not None for v in (self.status, self.queue, self.account, self.parent))

    def light_match(self, status: str | None, account: str | None, spec: dict[str, Any], default_queue: str) -> bool:
        """`matches` on the raw fields (no record parsed); an entry it keeps is then checked in full."""
        given = spec.get("metadata")
        metadata: dict[str, Any] = given if isinstance(given, dict) else {}
        return (
            (self.status is None or status == self.status)
            and (self.tenant is None or spec.get("tenant", DEFAULT_TENANT) == self.tenant)
            and (self.queue is None or (spec.get("queue") or default_queue) == self.queue)
            and (self.account is None or self.account in (account, spec.get("account")))
            and (self.parent is None or metadata.get(PARENT_JOB_KEY) == self.parent)
        )


@dataclass
class Page:
    """One page of the list: its rows, where the next one starts (None: the index ends here), how many index entries
    were read and the creation time (ms) of the oldest one read."""

    rows: list[JobRecord | RecordUnreadable] = field(default_factory=list)
    next_cursor: str | None = None
    scanned: int = 0
    oldest_ms: int | None = None


def parse_cursor(value: str | None) -> tuple[float, int]:
    """`score:skip` -> (highest score still to read, entries at that score already read); ValueError when bad."""
    if not value:
        return math.inf, 0
    score, sep, skip = value.partition(":")
    try:
        position = (float(score), int(skip))
    except ValueError:
        position = (math.nan, -1)
    if not sep or position[1] < 0 or math.isnan(position[0]):
        raise ValueError("cursor: not a position in the list (use the page's own Older link)")
    return position


def _cursor(score: float, skip: int) -> str:
    return f"{score:.0f}:{skip}" if math.isfinite(score) else f"inf:{skip}"


def list_page(
    client: Client, wanted: JobFilter, *, limit: int = 50, cursor: str | None = None, max_scan: int = MAX_SCAN
) -> Page:
    """The page of jobs matching `wanted`, newest first, starting at `cursor` (see the module's docstring)."""
    store, keys = client.store, client.store.keys
    default_queue = client.settings.queue
    if wanted.conversation is not None:
        return _conversation_page(client, wanted, limit)
    source = keys.jobs
    if wanted.tenant is not None and client._indexes():
        source = keys.tenant_index(wanted.tenant)
    floor = wanted.since_ms if wanted.since_ms is not None else -math.inf
    if wanted.parent is not None:
        try:  # a job's children are created after it
            floor = max(floor, int(run_call(store.get_call(wanted.parent)).created_at.timestamp() * 1000))
        except ClaudeqError:
            pass  # an expired parent: its children may still be retained
    score, skip = parse_cursor(cursor)
    page = Page()
    chunk = limit  # every entry may match: read no more than the page; a filter that skips some reads more
    light = wanted.light()
    while len(page.rows) < limit and page.scanned < max_scan:
        num = min(chunk, max_scan - page.scanned)
        chunk = min(CHUNK, chunk * 2)
        top = "+inf" if math.isinf(score) else repr(score)
        bottom = "-inf" if math.isinf(floor) else repr(floor)
        entries: list[tuple[Any, float]] = store.redis.zrevrangebyscore(
            source, top, bottom, start=skip, num=num, withscores=True
        )  # type: ignore[assignment]
        if not entries:
            return page  # the index ends: no next page
        ids = [text(member) for member, _ in entries]
        wanted_ids = _light_pass(client, ids, wanted) if light else ids
        records = dict(zip(wanted_ids, run_call(store.records_call(wanted_ids)), strict=True))
        for job_id, (_, entry_score) in zip(ids, entries, strict=True):
            page.scanned += 1
            if entry_score == score:
                skip += 1
            else:
                score, skip = entry_score, 1
            page.oldest_ms = int(entry_score)
            record = records.get(job_id)
            if isinstance(record, RecordUnreadable):
                if wanted == JobFilter():  # an unreadable record is nobody's: shown only in the whole fleet's list
                    page.rows.append(record)
            elif record is not None and wanted.matches(record, default_queue):
                page.rows.append(record)
            if len(page.rows) >= limit:
                break
        else:
            if len(entries) < num:
                return page  # read to the end of the index
    page.next_cursor = _cursor(score, skip)
    return page


def _light_pass(client: Client, ids: list[str], wanted: JobFilter) -> list[str]:
    """The ids among `ids` whose status, account and spec (read alone, one round trip) may match `wanted`; those
    whose fields cannot be read so stay in, for the full read to report."""
    pipe = client.store.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(client.store.keys.job(job_id), ["status", "account", "spec"])
    kept = []
    for job_id, reply in zip(ids, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, Exception):
            kept.append(job_id)
            continue
        status, account, spec = reply
        if status is None:
            continue  # expired
        try:
            fields = json.loads(spec) if spec else {}
        except ValueError:
            kept.append(job_id)
            continue
        if not isinstance(fields, dict) or wanted.light_match(
            text(status), text(account) if account else None, fields, client.settings.queue
        ):
            kept.append(job_id)
    return kept


def _conversation_page(client: Client, wanted: JobFilter, limit: int) -> Page:
    """A conversation's jobs: the one running its turn, those waiting for theirs and its finished turns (a
    conversation's keys are in its tenant's scope: another tenant's conversation of the same name is another)."""
    keys, r = client.store.keys, client.store.redis
    name, tenant = wanted.conversation or "", wanted.tenant or DEFAULT_TENANT
    pipe = r.pipeline(transaction=False)
    pipe.get(keys.conversation_lock(name, tenant))
    pipe.zrevrange(keys.conversation_waiters(name, tenant), 0, -1)
    holder, waiting = pipe.execute()
    turns = client._conversations.turns(name, tenant)
    ids = list(dict.fromkeys([*(text(i) for i in waiting), *([text(holder)] if holder else [])]))
    ids += [t.job_id for t in reversed(turns) if t.job_id not in ids]
    page = Page(scanned=len(ids))
    scoped = dataclasses.replace(wanted, tenant=tenant)
    found = [
        r
        for r in run_call(client.store.records_call(ids))
        if isinstance(r, JobRecord) and scoped.matches(r, client.settings.queue)
    ]
    found.sort(key=lambda r: r.created_at, reverse=True)
    page.rows = list(found[:limit])
    return page


def children_of(client: Client, parent: JobRecord, limit: int = 50, max_scan: int = MAX_SCAN) -> list[JobRecord]:
    """The jobs `parent` submitted (its fleet tools' children are its tenant's), oldest first: read upward from the
    parent's creation, where they are (a run submits its children while it runs), at most `max_scan` entries."""
    keys = client.store.keys
    source = keys.tenant_index(parent.spec.tenant) if client._indexes() else keys.jobs
    floor = int(parent.created_at.timestamp() * 1000)
    ids = [text(i) for i in client.store.redis.zrangebyscore(source, floor, "+inf", start=0, num=max_scan)]
    wanted = JobFilter(parent=parent.id, tenant=parent.spec.tenant)
    candidates = _light_pass(client, [i for i in ids if i != parent.id], wanted)
    found = [
        r for r in run_call(client.store.records_call(candidates)) if isinstance(r, JobRecord) and wanted.matches(r, "")
    ]
    return found[:limit]
