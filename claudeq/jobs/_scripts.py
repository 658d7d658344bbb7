"""The Lua scripts for the job transitions producers start: submit (create) and cancel, each atomic in Redis.

Their text is in `claudeq/lua/job/` (each file's header says its KEYS, ARGV and answer; the functions they share in
`claudeq/lua/lib/`, docs/architecture.md#lua-scripts). Status lives in the job hash's `status` field and the
fencing token in `fence` (the scripts only workers run — claim, heartbeat, fenced write, promote, recover, resend —
are in claudeq/worker/store/worker_job_scripts.py).

The idempotency key (`idem:{key}` in its tenant's scope, `Keys.idem`; named in the job hash's `idem` field) lives as
long as its job: it has no expiry until the job reaches a terminal state, then the job's retention. The scripts that
finish a job read that name from the hash, so claudeq needs a single Redis node (or a primary with replicas), not Redis
Cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from claudeq.lua import script
from claudeq.script_args import Arg, ScriptArgs, key

#: Trim a tenant's index after a batch added to it with ZADD.
TRIM_INDEX = script("job/trim_index.lua")
#: Write a new job (its hash, indexes, idempotency key, conversation turn, tenant index entry).
CREATE = script("job/create.lua")
#: A producer's submit: CREATE's write and, for a job it created, its active-job index entry, tag and broker message.
SUBMIT = script("job/submit.lua")
#: Cancel a queued or deferred job now; flag a running one.
CANCEL = script("job/cancel.lua")
#: A job's dead end notifications tried again (`claudeq webhooks retry`).
RETRY_NOTIFICATIONS = script("outbox/retry.lua")
#: Answer a job's pending approval request, once (docs/jobs.md#tool-approval).
APPROVAL_DECIDE = script("job/approval_decide.lua")


# ---- the scripts' arguments, by name (claudeq/script_args.py) ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrimIndexArgs(ScriptArgs):
    SCRIPT = "job/trim_index.lua"
    index: str = key()
    job_key_prefix: str
    cutoff_ms: int
    n: int


@dataclass(frozen=True, kw_only=True)
class CreateArgs(ScriptArgs):
    SCRIPT = "job/create.lua"
    job: str = key()
    jobs: str = key()
    queued: str = key()
    idem: str = key()
    conversation_waiters: str = key()
    conversation_seq: str = key()
    tenant_index: str = key()
    waiting: str = key()
    outbox: str = key()
    job_id: str
    created_ms: int
    now_s: float
    job_key_prefix: str
    conversation_ttl_s: int
    index_cutoff_ms: int
    fields: Sequence[Arg]


@dataclass(frozen=True, kw_only=True)
class SubmitArgs(ScriptArgs):
    SCRIPT = "job/submit.lua"
    tenant_jobs: str = key()
    fair_share: str = key()
    broker_list: str = key()
    backlog_list: str = key()
    tenant: str
    weight: str
    backlog: int
    message: str
    backlog_message: str
    create: CreateArgs


@dataclass(frozen=True, kw_only=True)
class CancelArgs(ScriptArgs):
    SCRIPT = "job/cancel.lua"
    job: str = key()
    deferred: str = key()
    queued: str = key()
    stream: str = key()
    outbox: str = key()
    waiting: str = key()
    job_id: str
    now_iso: str
    ttl_s: int
    error_json: str
    event_json: str
    events_maxlen: int
    finished_counts_prefix: str


@dataclass(frozen=True, kw_only=True)
class RetryNotificationsArgs(ScriptArgs):
    SCRIPT = "outbox/retry.lua"
    job: str = key()
    outbox: str = key()
    outbox_dead: str = key()
    job_id: str
    now_s: float


@dataclass(frozen=True, kw_only=True)
class ApprovalDecideArgs(ScriptArgs):
    SCRIPT = "job/approval_decide.lua"
    job: str = key()
    deferred: str = key()
    request_id: str
    tenant: str
    decision_json: str
    job_id: str
