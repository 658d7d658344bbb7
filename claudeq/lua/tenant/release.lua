-- RELEASE (TenantStore): end a run of the tenant (its reservation too); when the tenant is under its cap again, pop
-- its best waiters still `deferred` (stale ones are dropped), as many as it is under its cap (one without a cap; more
-- when the cap rose, a share cap as other tenants went idle).
-- KEYS: tenant runs, tenant reserved, tenant waiters.
-- ARGV: job_id, job_key_prefix, max ('' = no cap), now_s
-- Result: {ids} to promote, best first, or {}.

redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[4]))
local room = 1
if ARGV[3] ~= '' then room = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1]) end
local out = {}
while #out < room do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #head == 0 then return out end
  redis.call('ZREM', KEYS[3], head[1])
  if redis.call('HGET', ARGV[2] .. head[1], 'status') == 'deferred' then out[#out + 1] = head[1] end
end
return out
