"""The Lua scripts for the job transitions only workers run: claim, heartbeat, fenced write, promote, recover, resend.

Their text is in `claudeq/lua/job/` (each file's header says its KEYS, ARGV and answer; the functions they share
with the account and tenant scripts in `claudeq/lua/lib/`, docs/architecture.md#lua-scripts). A run may write only
while the fence it was given still matches (a paused worker whose lease was taken over must not overwrite). The
idempotency key's expiry follows its job's (see claudeq/jobs/_scripts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from claudeq.accounts import AcquireArgs
from claudeq.lua import script
from claudeq.script_args import Arg, ScriptArgs, key, part
from claudeq.tenants import SettleArgs

#: Take a queued job: status `running`, the fence raised, the lease.
CLAIM = script("job/claim.lua")
#: Extend a run's lease, slot and tenant run; look for a missed cancel.
HEARTBEAT = script("job/heartbeat.lua")
#: The fenced write of a run: fields, a new status, its events.
WRITE = script("job/write.lua")
#: A job's end: the terminal write, its spend, its slot released and handed on, the job out of the index.
FINISH = script("job/finish.lua")
#: An attempt's start: the account slot and the fenced write of the start.
START = script("job/start.lua")
#: A run's events, under its fence.
APPEND = script("job/append.lua")
#: A deferred job that is due goes back to `queued`.
PROMOTE = script("job/promote.lua")
#: A running job whose lease expired goes back to queued (or fails, poisoned).
RECOVER = script("job/recover.lua")
#: A finished job's compacted events, compressed, replace their JSON (if unchanged since read).
PACK_EVENTS = script("job/pack_events.lua")
#: Claim a resend of an unclaimed queued job.
RESEND = script("job/resend.lua")
#: A `running` set of an earlier claudeq becomes the sorted set.
UPGRADE_RUNNING = script("job/upgrade_running.lua")
#: The due jobs of the outbox, each taken with a lease (the notifier).
CLAIM_NOTIFICATIONS = script("outbox/claim.lua")
#: A job's Celery callback, sent exactly once.
LINK = script("outbox/link.lua")
#: A notifier pass's delivery log in the record, and the job's next place in the outbox.
SETTLE_NOTIFICATIONS = script("outbox/settle.lua")
#: Record a run's request for approval of a tool use in the job hash, fenced (docs/jobs.md#tool-approval).
APPROVAL_OPEN = script("job/approval_open.lua")


# ---- the scripts' arguments, by name (claudeq/script_args.py) ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ClaimArgs(ScriptArgs):
    SCRIPT = "job/claim.lua"
    job: str = key()
    queued: str = key()
    running: str = key()
    job_id: str
    worker: str
    lease_expiry: str
    now_iso: str
    now_s: str


@dataclass(frozen=True, kw_only=True)
class HeartbeatArgs(ScriptArgs):
    SCRIPT = "job/heartbeat.lua"
    job: str = key()
    running: str = key()
    holders: Sequence[str] = key()
    fence: int
    job_id: str
    expiry_s: str
    worker: str


@dataclass(frozen=True, kw_only=True)
class AppendArgs(ScriptArgs):
    SCRIPT = "job/append.lua"
    job: str = key()
    stream: str = key()
    fence: int
    events_maxlen: int
    events: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class PackEventsArgs(ScriptArgs):
    SCRIPT = "job/pack_events.lua"
    job: str = key()
    read: bytes
    packed: bytes


@dataclass(frozen=True, kw_only=True)
class PromoteArgs(ScriptArgs):
    SCRIPT = "job/promote.lua"
    deferred: str = key()
    job: str = key()
    queued: str = key()
    job_id: str
    now_s: str


@dataclass(frozen=True, kw_only=True)
class RecoverArgs(ScriptArgs):
    SCRIPT = "job/recover.lua"
    job: str = key()
    running: str = key()
    queued: str = key()
    stream: str = key()
    outbox: str = key()
    deferred: str = key()
    waiting: str = key()
    job_id: str
    fence: int | str
    now_s: float
    event_json: str
    events_maxlen: int
    new_status: str
    ttl_s: int
    finished_counts_prefix: str
    on_cancel: str
    fields: Sequence[Arg]


@dataclass(frozen=True, kw_only=True)
class ResendArgs(ScriptArgs):
    SCRIPT = "job/resend.lua"
    queued: str = key()
    job: str = key()
    job_id: str
    sent_before_s: float
    now_s: float


@dataclass(frozen=True, kw_only=True)
class UpgradeRunningArgs(ScriptArgs):
    SCRIPT = "job/upgrade_running.lua"
    running: str = key()
    lease_expiry: str


@dataclass(frozen=True, kw_only=True)
class ClaimNotificationsArgs(ScriptArgs):
    SCRIPT = "outbox/claim.lua"
    outbox: str = key()
    now_s: float
    limit: int
    lease_until_s: float


@dataclass(frozen=True, kw_only=True)
class LinkArgs(ScriptArgs):
    SCRIPT = "outbox/link.lua"
    job: str = key()
    queue: str = key()
    sent_field: str
    message: str


@dataclass(frozen=True, kw_only=True)
class SettleNotificationsArgs(ScriptArgs):
    SCRIPT = "outbox/settle.lua"
    job: str = key()
    outbox: str = key()
    outbox_dead: str = key()
    job_id: str
    notifications: str
    next_due_s: str
    dead: str
    now_s: float
    cursor: str


@dataclass(frozen=True, kw_only=True)
class ApprovalOpenArgs(ScriptArgs):
    SCRIPT = "job/approval_open.lua"
    job: str = key()
    fence: str
    approval_json: str


@dataclass(frozen=True, kw_only=True)
class WriteArgs(ScriptArgs):
    SCRIPT = "job/write.lua"
    job: str = key()
    running: str = key()
    queued: str = key()
    deferred: str = key()
    stream: str = key()
    outbox: str = key()
    waiting: str = key()
    job_id: str
    fence: int
    new_status: str
    ttl_s: int
    score: float
    finished_counts_prefix: str
    n_events: int
    events_maxlen: int
    now_ms: int
    on_cancel: str
    events: Sequence[str]
    fields: Sequence[Arg]


@dataclass(frozen=True, kw_only=True)
class StartArgs(ScriptArgs):
    SCRIPT = "job/start.lua"
    acquire: AcquireArgs
    write: WriteArgs


@dataclass(frozen=True, kw_only=True)
class FinishArgs(ScriptArgs):
    SCRIPT = "job/finish.lua"
    write_keys: WriteArgs = field(metadata=part("keys", "write"))
    slots: str = key()
    account: str = key()
    lines: Sequence[str] = key()
    spend_pairs: Sequence[str] = key()
    unindex: Sequence[str] = key()
    job_key_prefix: str
    now_s: str
    max_concurrency: int
    expiry_s: str
    predictive: str
    ramp_rate: str
    jitter_s: str
    n_spend: int
    settle: SettleArgs = field(metadata=part("argv", "settle"))
    write: WriteArgs = field(metadata=part("argv", "write"))
