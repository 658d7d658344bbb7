"""The Lua scripts for the job transitions only workers run: claim, heartbeat, fenced write, promote, recover, resend.

Their text is in `claudeq/lua/job/` (each file's header says its KEYS, ARGV and answer; the functions they share
with the account and tenant scripts in `claudeq/lua/lib/`, docs/architecture.md#lua-scripts). A run may write only
while the fence it was given still matches (a paused worker whose lease was taken over must not overwrite). The
idempotency key's expiry follows its job's (see claudeq/job_scripts.py).
"""

from __future__ import annotations

from claudeq.lua import script

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
