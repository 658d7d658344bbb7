-- TAG (TenantStore): the job's virtual finish tag for weighted fair queueing (docs/architecture.md#fair-share), issued
-- once per job and kept in its hash (`vtag`): max(system virtual time, the tenant's last tag) + 1 / weight. The
-- system virtual time (`v`) is the largest tag admitted so far (tenant/advance.lua).
-- KEYS: fair-share hash, job hash.
-- ARGV: tenant, weight
-- Result: the tag, as a string.

local tag = redis.call('HGET', KEYS[2], 'vtag')
if tag then return tag end
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
local last = tonumber(redis.call('HGET', KEYS[1], 't:' .. ARGV[1]) or '0') or 0
local start = v
if last > start then start = last end
tag = tostring(start + 1 / tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 't:' .. ARGV[1], tag)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], 'vtag', tag) end
return tag
