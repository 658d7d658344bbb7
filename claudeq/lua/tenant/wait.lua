-- WAIT (TenantStore): a deferred job waits for one of its tenant's runs to end (it keeps its place if already
-- waiting). A run may have ended between the caller's failed admission and this call (its release found nobody to
-- promote): then the job's deferred ready time moves to now, so the promoter picks it up at its next pass. Otherwise
-- its ready time moves out to `fallback_s` (never earlier): a run's end promotes it, the ready time is only the
-- fallback (a re-send every lease TTL would put a whole backlog through the broker again and again). A job deferred
-- but not yet waiting here (its worker died in between) keeps the short ready time it was deferred with.
-- KEYS: tenant runs, tenant waiters, deferred.
-- ARGV: job_id, score, max, now_s, fallback_s (epoch)
-- Result: 1 the ready time moved to now, else 0.

redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[4]))
local ready = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
if not ready then return 0 end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[3], 'XX', ARGV[4], ARGV[1])
  return 1
end
if ARGV[5] ~= nil and ARGV[5] ~= '' and ready < tonumber(ARGV[5]) then
  redis.call('ZADD', KEYS[3], 'XX', ARGV[5], ARGV[1])
end
return 0
