-- RELEASE (TenantStore): end a run of the tenant (its reservation too); when the tenant is under its cap again, pop
-- its best waiters still `deferred` (stale ones are dropped), as many as it is under its cap (one without a cap; more
-- when the cap rose, a share cap as other tenants went idle).
-- KEYS: `runs`, `reserved`, `waiters`: the tenant's.
-- ARGV: `job_id`, `job_key_prefix`, `max` ('' = no cap), `now_s`
-- Result: {ids} to promote, best first, or {}.

local runs = KEYS[1]
local reserved = KEYS[2]
local waiters = KEYS[3]
local job_id = ARGV[1]
local job_key_prefix = ARGV[2]
local max = ARGV[3]
local now_s = tonumber(ARGV[4])

redis.call('ZREM', runs, job_id)
redis.call('HDEL', reserved, job_id)
redis.call('ZREMRANGEBYSCORE', runs, '-inf', now_s)
local room = 1
if max ~= '' then room = tonumber(max) - redis.call('ZCARD', runs) end
local out = {}
while #out < room do
  local head = redis.call('ZRANGE', waiters, 0, 0)
  if #head == 0 then return out end
  redis.call('ZREM', waiters, head[1])
  if redis.call('HGET', job_key_prefix .. head[1], 'status') == 'deferred' then out[#out + 1] = head[1] end
end
return out
