-- RESEND (WorkerJobStore): claims a resend of an unclaimed queued job (once).
-- KEYS: `queued`, `job`.
-- ARGV: `job_id`, `sent_before_s` (sent before this time, epoch s: the resend is due), `now_s`
-- Result: 1 the caller sends it again, else 0.

local queued = KEYS[1]
local job = KEYS[2]
local job_id = ARGV[1]
local sent_before_s = ARGV[2]
local now_s = ARGV[3]

local score = redis.call('ZSCORE', queued, job_id)
if not score or tonumber(score) > tonumber(sent_before_s) then return 0 end
if redis.call('HGET', job, 'status') ~= 'queued' then
  redis.call('ZREM', queued, job_id)
  return 0
end
redis.call('ZADD', queued, now_s, job_id)
return 1
