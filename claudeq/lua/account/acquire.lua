-- ACQUIRE (AccountStore, claudeq/accounts/_store.py): take a slot of the account for a job.
-- KEYS: `slots`, `account` (its hash), `lines` (its four, in FAMS order).
-- ARGV: `job_id`, `max_concurrency`, `expiry_s`, `now_s`, `rank` ('' = none), `job_key_prefix`, `family` (its index,
--       1..4 in FAMS), `predictive` ('1'/''), `ramp_rate`, `jitter_s`, `may_hold` ('1'/'': whether the job may hold a
--       slot here already; '' skips that check and counts the live slots without dropping the expired ones, which
--       the promoter's pass, admit, drops: two commands fewer on every first acquire)
-- Result: a Slot code (claudeq/lua/results.py): ACQUIRED (or already held: ZADD refreshes, so a redelivery never
--   takes two slots; a slot handed over by `admit` is taken this way, unless the job's family was closed meanwhile:
--   then it is given back, RESERVED), FULL, DISABLED, COOLING (the account, or the job's model family), HELD (see
--   lib/held.lua), IN_LINE (the free slots belong to waiters ranked before this job: it waits in line), RESERVED,
--   RAMPING (see lib/gate.lua). The account's state is checked here too, so a cooldown written by another worker a
--   moment ago is honoured even when the caller's snapshot was older. The attempt's start in the same script on a
--   worker: job/start.lua.

--!include lib/acquire.lua
--!include lib/args.lua

local slots = KEYS[1]
local account = KEYS[2]
local lines = args_list(KEYS, 3, 6)
local job_id = ARGV[1]
local max_concurrency = ARGV[2]
local expiry_s = ARGV[3]
local now_s = ARGV[4]
local rank = ARGV[5]
local job_key_prefix = ARGV[6]
local family = ARGV[7]
local predictive = ARGV[8]
local ramp_rate = ARGV[9]
local jitter_s = ARGV[10]
local may_hold = ARGV[11]

return acquire({slots = slots, account = account, lines = lines, job_id = job_id, max_concurrency = max_concurrency,
                expiry_s = expiry_s, now_s = now_s, rank = rank, job_key_prefix = job_key_prefix, family = family,
                predictive = predictive, ramp_rate = ramp_rate, jitter_s = jitter_s, may_hold = may_hold})
