-- FINISH (WorkerJobStore): a job's end in one round trip instead of four: the terminal write (lib/write.lua), the
-- attempt's spend counted (lib/settle.lua), the slot freed and handed to the best waiters (lib/release.lua: the ids,
-- now queued, whose messages the caller sends), the job out of the index.
-- KEYS: job/write.lua's seven, then the run's account slot: slots, account hash, its four waiting lines; then the
--       spend and reserved hashes its last attempt's cost counts against (none, or a pair or two); then the sorted
--       sets the finished job leaves (its tenants' active-job index).
-- ARGV: account/release.lua's (minus the job id): job_key_prefix, now_s, max_concurrency, expiry_s, predictive, ramp
--       rate, jitter_s; then how many spend keys there are and settle's eight arguments ('' each when none); then
--       job/write.lua's.
-- Result: {0} when the fence no longer holds the job (nothing written, released or counted: the new owner may hold
--   this very slot, and the caller counts the spend itself), else {1, ids...}.

--!include lib/account_state.lua
--!include lib/release.lua
--!include lib/settle.lua
--!include lib/write.lua

local ns = tonumber(ARGV[8])
local wargv = {unpack_(ARGV, 17)}
if write(KEYS, wargv, KEYS[6], KEYS[7]) == {{Write.LOST}} then return {0} end
if ns > 0 then settle({unpack_(KEYS, 14, 13 + ns)}, ARGV, 9) end
local out = {1}
release(wargv[1], KEYS[8], KEYS[9], {KEYS[10], KEYS[11], KEYS[12], KEYS[13]}, tonumber(ARGV[3]), ARGV[4],
        tonumber(ARGV[2]), ARGV[1], {KEYS[4], KEYS[3]}, {ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]}, out)
for i = 14 + ns, #KEYS do redis.call('ZREM', KEYS[i], wargv[1]) end
return out
