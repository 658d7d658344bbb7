-- CLAIM (WorkerJobStore, worker/store/job_store.py): a worker takes a queued job: status `running`, the fence raised,
-- the lease (its score in the `running` sorted set: when it expires, epoch s, the claiming or beating worker's clock;
-- worker clocks must agree within a lease TTL less a heartbeat interval). The job hash's `fence` says whose run it is:
-- a claim raises it, and every write of a run checks it. One HGETALL reads status, fence, started_at and the cancel
-- flag too: a claim costs 4 commands inside Redis.
-- KEYS: `job`, `queued`, `running`.
-- ARGV: `job_id`, `worker`, `lease_expiry` (epoch s), `now_iso`, `now_s`
-- Result: {result, fence, first, record, cancelled}: result 'ok' (or 'missing', 'busy', 'orphan', the status it is
--   in, with fence 0 and nothing else); first = 1 on the job's first claim ever (its queue wait ends here); record =
--   the job hash as it was before the claim (flat field/value list) and cancelled = 1 when the cancel flag (the
--   record's 'cancel' field) is set, so the worker needs no second round trip before its first attempt.

local job = KEYS[1]
local queued = KEYS[2]
local running = KEYS[3]
local job_id = ARGV[1]
local worker = ARGV[2]
local lease_expiry = ARGV[3]
local now_iso = ARGV[4]
local now_s = ARGV[5]

local flat = redis.call('HGETALL', job)
if #flat == 0 then return {'missing', 0} end
local cur = {}
for i = 1, #flat, 2 do cur[flat[i]] = flat[i + 1] end
local status = cur['status']
if not status then return {'missing', 0} end
if status == 'running' then
  local expiry = tonumber(redis.call('ZSCORE', running, job_id))
  if expiry and expiry > tonumber(now_s) then return {'busy', 0} end
  return {'orphan', 0}
end
if status ~= 'queued' then return {status, 0} end
local fence = (tonumber(cur['fence']) or 0) + 1
local first = 0
if cur['started_at'] then
  redis.call('HSET', job, 'status', 'running', 'worker', worker, 'fence', fence)
else
  first = 1
  redis.call('HSET', job, 'status', 'running', 'worker', worker, 'fence', fence, 'started_at', now_iso)
end
redis.call('ZREM', queued, job_id)
redis.call('ZADD', running, lease_expiry, job_id)
return {'ok', fence, first, flat, cur['cancel'] and 1 or 0}
