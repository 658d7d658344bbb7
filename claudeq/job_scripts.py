"""The Lua scripts for the job transitions producers start: create and cancel. Each runs atomically inside Redis.

Their text is in `claudeq/lua/job/` (each file's header says its KEYS, ARGV and answer; the functions they share in
`claudeq/lua/lib/`, docs/architecture.md#lua-scripts). Status lives in the job hash's `status` field and the
fencing token in `fence` (the scripts only workers run — claim, heartbeat, fenced write, promote, recover, resend —
are in claudeq/worker/store/job_scripts.py).

The idempotency key (`idem:{key}` in its tenant's scope, `Keys.idem`; named in the job hash's `idem` field) lives as
long as its job: it has no expiry until the job reaches a terminal state, then the job's retention. The scripts that
finish a job read that name from the hash, so claudeq needs a single Redis node (or a primary with replicas), not Redis
Cluster.
"""

from __future__ import annotations

from claudeq.lua import script

#: Trim a tenant's index after a batch added to it with ZADD.
TRIM_INDEX = script("job/trim_index.lua")
#: Write a new job (its hash, indexes, idempotency key, conversation turn, tenant index entry).
CREATE = script("job/create.lua")
#: Cancel a queued or deferred job now; flag a running one.
CANCEL = script("job/cancel.lua")
#: A job's dead end notifications tried again (`claudeq webhooks retry`).
RETRY_NOTIFICATIONS = script("outbox/retry.lua")
#: Answer a job's pending approval request, once (docs/jobs.md#tool-approval).
APPROVAL_DECIDE = script("job/approval_decide.lua")
