-- PROMOTE (WorkerJobStore): a deferred job whose ready time is due goes back to `queued`.
-- KEYS: deferred, job, queued.
-- ARGV: job_id, now_s (a due limit; '+inf' promotes regardless of ready time)
-- Result: 1 promoted, else 0.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
if ARGV[2] ~= '+inf' and tonumber(score) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[2], 'status') ~= 'deferred' then return 0 end
redis.call('HSET', KEYS[2], 'status', 'queued')
redis.call('HDEL', KEYS[2], 'ready_at')
local now = redis.call('TIME')
redis.call('ZADD', KEYS[3], now[1], ARGV[1])
return 1
