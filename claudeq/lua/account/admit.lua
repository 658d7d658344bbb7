-- ADMIT (AccountStore): the promoter's pass over an account: hand its free slots to its best waiters (after a
-- cooldown ends, a hold lifts, a window resets, or a slot expired).
-- KEYS: `slots`, `account` (its hash), `lines` (its four, in FAMS order), `deferred`, `queued`.
-- ARGV: `job_key_prefix`, `now_s`, `max_concurrency`, `expiry_s`, `predictive`, `ramp_rate`, `jitter_s`
-- Result: the ids handed a slot, now queued: the caller sends their messages.

--!include lib/admit.lua
--!include lib/args.lua

local slots = KEYS[1]
local account = KEYS[2]
local lines = args_list(KEYS, 3, 6)
local deferred = KEYS[7]
local queued = KEYS[8]
local job_key_prefix = ARGV[1]
local now_s = tonumber(ARGV[2])
local max_concurrency = tonumber(ARGV[3])
local expiry_s = ARGV[4]
local predictive = ARGV[5]
local ramp_rate = tonumber(ARGV[6])
local jitter_s = ARGV[7]

local out = {}
admit(lines, slots, account, max_concurrency, expiry_s, now_s, job_key_prefix, {deferred, queued},
      {predictive == '1', ramp_rate, jitter_s}, out)
return out
