-- HEARTBEAT (WorkerJobStore): extend a run's lease, its slot and its tenant's run, and look for a missed cancel: one
-- round trip per heartbeat.
-- KEYS: `job`, `running`, then `holders`: the sorted sets that hold the run with an expiry (its account slot first,
--       then its tenant's runs).
-- ARGV: `fence`, `job_id`, `expiry_s`, `worker`
-- Result: {ours, held, cancelled}: the lease extended (0: the fence and worker no longer hold the running job, nothing
--   touched; a lease that expired with nobody recovering the job meanwhile is still ours); whether the first set
--   still held the run (its expiry moved; 1 when there is none); whether the cancel flag is set (the record's
--   'cancel').

--!include lib/args.lua

local job = KEYS[1]
local running = KEYS[2]
local holders = args_list(KEYS, 3)
local fence = ARGV[1]
local job_id = ARGV[2]
local expiry_s = ARGV[3]
local worker = ARGV[4]

local cur = redis.call('HMGET', job, 'fence', 'status', 'cancel', 'worker')
if cur[1] ~= fence or cur[2] ~= 'running' or cur[4] ~= worker then return {0, 0, 0} end
redis.call('ZADD', running, expiry_s, job_id)
local held = 1
for i, holder in ipairs(holders) do
  local changed = redis.call('ZADD', holder, 'XX', 'CH', expiry_s, job_id)
  if i == 1 then held = changed end
end
return {1, held, cur[3] and 1 or 0}
