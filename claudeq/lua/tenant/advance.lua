-- ADVANCE (TenantStore): a job with this tag started: the system virtual time moves up to it.
-- KEYS: fair-share hash.
-- ARGV: tag
-- Result: 1

local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
if tonumber(ARGV[1]) > v then redis.call('HSET', KEYS[1], 'v', ARGV[1]) end
return 1
