-- HEARTBEAT (WorkerJobStore): extend a run's lease, its slot and its tenant's run, and look for a missed cancel: one
-- round trip per heartbeat.
-- KEYS: job, running, then the sorted sets that hold the run with an expiry (its account slot first, then its
--       tenant's runs).
-- ARGV: fence, job_id, expiry_s, worker
-- Result: {ours, held, cancelled}: the lease extended (0: the fence and worker no longer hold the running job, nothing
--   touched; a lease that expired with nobody recovering the job meanwhile is still ours); whether the first set
--   still held the run (its expiry moved; 1 when there is none); whether the cancel flag is set (the record's
--   `cancel`).

local cur = redis.call('HMGET', KEYS[1], 'fence', 'status', 'cancel', 'worker')
if cur[1] ~= ARGV[1] or cur[2] ~= 'running' or cur[4] ~= ARGV[4] then return {0, 0, 0} end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
local held = 1
for i = 3, #KEYS do
  local changed = redis.call('ZADD', KEYS[i], 'XX', 'CH', ARGV[3], ARGV[2])
  if i == 3 then held = changed end
end
return {1, held, cur[3] and 1 or 0}
