-- ADMIT (AccountStore): the promoter's pass over an account: hand its free slots to its best waiters (after a
-- cooldown ends, a hold lifts, a window resets, or a slot expired).
-- KEYS: slots, account hash, the four lines, deferred, queued.
-- ARGV: job_key_prefix, now_s, max_concurrency, expiry_s, predictive, ramp rate, jitter_s
-- Result: the ids handed a slot, now queued: the caller sends their messages.

--!include lib/admit.lua

local out = {}
admit({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, KEYS[1], KEYS[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[2]), ARGV[1],
      {KEYS[7], KEYS[8]}, {ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]}, out)
return out
