-- WAIT (TenantStore): a deferred job waits for one of its tenant's runs to end (it keeps its place if already
-- waiting). A run may have ended between the caller's failed admission and this call (its release found nobody to
-- promote): then the job's deferred ready time moves to now, so the promoter picks it up at its next pass. Otherwise
-- its ready time moves out to fallback_s (never earlier): a run's end promotes it, the ready time is only the
-- fallback (a re-send every lease TTL would put a whole backlog through the broker again and again). A job deferred
-- but not yet waiting here (its worker died in between) keeps the short ready time it was deferred with.
-- KEYS: `runs`, `waiters` (the tenant's), `deferred`.
-- ARGV: `job_id`, `score`, `max`, `now_s`, `fallback_s` (epoch)
-- Result: 1 the ready time moved to now, else 0.

local runs = KEYS[1]
local waiters = KEYS[2]
local deferred = KEYS[3]
local job_id = ARGV[1]
local score = ARGV[2]
local max = tonumber(ARGV[3])
local now_s = ARGV[4]
local fallback_s = ARGV[5]

redis.call('ZADD', waiters, 'NX', score, job_id)
redis.call('ZREMRANGEBYSCORE', runs, '-inf', tonumber(now_s))
local ready = tonumber(redis.call('ZSCORE', deferred, job_id))
if not ready then return 0 end
if redis.call('ZCARD', runs) < max then
  redis.call('ZADD', deferred, 'XX', now_s, job_id)
  return 1
end
if fallback_s ~= nil and fallback_s ~= '' and ready < tonumber(fallback_s) then
  redis.call('ZADD', deferred, 'XX', fallback_s, job_id)
end
return 0
