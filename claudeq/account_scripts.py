"""The Lua scripts for the per-account semaphore and account state: each runs atomically inside Redis.

Their text is in `claudeq/lua/account/` (each file's header says its KEYS, ARGV and answer), the admission functions
they share in `claudeq/lua/lib/` (docs/architecture.md#lua-scripts). Times are epoch seconds passed in by the caller
(every worker and the CLI use their own clock, as the job store does). The account hash fields are described in
claudeq/account_state.py.
"""

from __future__ import annotations

from claudeq.lua import script

#: Take a slot of the account for a job (the attempt's start in the same script on a worker: START in
#: claudeq/worker/store/job_scripts.py).
ACQUIRE = script("account/acquire.lua")
#: Free a job's slot and hand the free slots to the best waiters.
RELEASE = script("account/release.lua")
#: The promoter's pass over an account: hand its free slots to its best waiters.
ADMIT = script("account/admit.lua")
#: Cool the account, or one model family of it.
COOL = script("account/cool.lua")
#: Set ok/warning, never over `disabled`.
SET_STATE = script("account/set_state.lua")
#: Put a deferred job in its family's waiting line of each account, then let each admit.
ADD_WAITER = script("account/add_waiter.lua")
#: Cool for an adaptive backoff after a 429 that said nothing about when to come back.
BACKOFF = script("account/backoff.lua")
#: Record the request and token readings behind admission.
RECORD_LIMITS = script("account/record_limits.lua")
#: Record the utilization readings behind window-aware admission.
RECORD_UTIL = script("account/record_util.lua")
