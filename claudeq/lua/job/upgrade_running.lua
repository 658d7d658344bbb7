-- UPGRADE_RUNNING (WorkerJobStore.upgrade_running): a `running` set of an earlier claudeq becomes the sorted set,
-- each run scored with a fresh lease.
-- KEYS: `running`.
-- ARGV: `lease_expiry` (epoch s)
-- Result: how many runs moved.

local running = KEYS[1]
local lease_expiry = ARGV[1]

if redis.call('TYPE', running).ok ~= 'set' then return 0 end
local ids = redis.call('SMEMBERS', running)
redis.call('DEL', running)
for _, id in ipairs(ids) do redis.call('ZADD', running, lease_expiry, id) end
return #ids
