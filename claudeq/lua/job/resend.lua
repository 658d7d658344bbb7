-- RESEND (WorkerJobStore): claims a resend of an unclaimed queued job (once).
-- KEYS: queued, job.
-- ARGV: job_id, older_than_s, now_s
-- Result: 1 the caller sends it again, else 0.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return 0 end
if redis.call('HGET', KEYS[2], 'status') ~= 'queued' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
