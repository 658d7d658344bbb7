-- ADVANCE (TenantStore): a job with this tag started: the system virtual time moves up to it.
-- KEYS: `fair_share` (its hash).
-- ARGV: `tag`
-- Result: 1

local fair_share = KEYS[1]
local tag = ARGV[1]

local v = tonumber(redis.call('HGET', fair_share, 'v') or '0') or 0
if tonumber(tag) > v then redis.call('HSET', fair_share, 'v', tag) end
return 1
