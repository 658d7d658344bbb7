-- RELEASE (AccountStore): free the job's slot, then hand the free slots to the best waiters still `deferred`
-- (`admit`). A cooling or disabled account admits nobody. The terminal write of a job does the same in its own
-- script (job/finish.lua).
-- KEYS: `slots`, `account` (its hash), `lines` (its four, in FAMS order), `deferred`, `queued`.
-- ARGV: `job_id`, `job_key_prefix`, `now_s`, `max_concurrency`, `expiry_s`, `predictive`, `ramp_rate`, `jitter_s`
-- Result: the ids handed a slot, now queued: the caller sends their messages.

--!include lib/release.lua
--!include lib/args.lua

local slots = KEYS[1]
local account = KEYS[2]
local lines = args_list(KEYS, 3, 6)
local deferred = KEYS[7]
local queued = KEYS[8]
local job_id = ARGV[1]
local job_key_prefix = ARGV[2]
local now_s = tonumber(ARGV[3])
local max_concurrency = tonumber(ARGV[4])
local expiry_s = ARGV[5]
local predictive = ARGV[6]
local ramp_rate = tonumber(ARGV[7])
local jitter_s = ARGV[8]

local out = {}
release(job_id, slots, account, lines, max_concurrency, expiry_s, now_s, job_key_prefix, {deferred, queued},
        {predictive == '1', ramp_rate, jitter_s}, out)
return out
