-- PROMOTE (WorkerJobStore): a deferred job whose ready time is due goes back to `queued`.
-- KEYS: `deferred`, `job`, `queued`.
-- ARGV: `job_id`, `now_s` (a due limit; '+inf' promotes regardless of ready time)
-- Result: 1 promoted, else 0.

local deferred = KEYS[1]
local job = KEYS[2]
local queued = KEYS[3]
local job_id = ARGV[1]
local now_s = ARGV[2]

local score = redis.call('ZSCORE', deferred, job_id)
if not score then return 0 end
if now_s ~= '+inf' and tonumber(score) > tonumber(now_s) then return 0 end
redis.call('ZREM', deferred, job_id)
if redis.call('HGET', job, 'status') ~= 'deferred' then return 0 end
redis.call('HSET', job, 'status', 'queued')
redis.call('HDEL', job, 'ready_at')
local now = redis.call('TIME')
redis.call('ZADD', queued, now[1], job_id)
return 1
