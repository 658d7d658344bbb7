-- RELEASE (AccountStore): free the job's slot, then hand the free slots to the best waiters still `deferred`
-- (`admit`). A cooling or disabled account admits nobody. The terminal write of a job does the same in its own
-- script (job/finish.lua).
-- KEYS: slots, account hash, the four lines, deferred, queued.
-- ARGV: job_id, job_key_prefix, now_s, max_concurrency, expiry_s, predictive, ramp rate, jitter_s
-- Result: the ids handed a slot, now queued: the caller sends their messages.

--!include lib/release.lua

local out = {}
release(ARGV[1], KEYS[1], KEYS[2], {KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[3]),
        ARGV[2], {KEYS[7], KEYS[8]}, {ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8]}, out)
return out
