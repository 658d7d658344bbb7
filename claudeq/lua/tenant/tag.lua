-- TAG (TenantStore): the job's virtual finish tag for weighted fair queueing (docs/architecture.md#fair-share), issued
-- once per job and kept in its hash (`vtag`): max(system virtual time, the tenant's last tag) + 1 / weight. The
-- system virtual time (`v`) is the largest tag admitted so far (tenant/advance.lua).
-- KEYS: `fair_share` (its hash), `job` (its hash).
-- ARGV: `tenant`, `weight`
-- Result: the tag, as a string.

local fair_share = KEYS[1]
local job = KEYS[2]
local tenant = ARGV[1]
local weight = tonumber(ARGV[2])

local tag = redis.call('HGET', job, 'vtag')
if tag then return tag end
local v = tonumber(redis.call('HGET', fair_share, 'v') or '0') or 0
local last = tonumber(redis.call('HGET', fair_share, 't:' .. tenant) or '0') or 0
local start = v
if last > start then start = last end
tag = tostring(start + 1 / weight)
redis.call('HSET', fair_share, 't:' .. tenant, tag)
if redis.call('EXISTS', job) == 1 then redis.call('HSET', job, 'vtag', tag) end
return tag
