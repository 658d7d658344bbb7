-- UPGRADE_RUNNING (WorkerJobStore.upgrade_running): a `running` set of an earlier claudeq becomes the sorted set,
-- each run scored with a fresh lease.
-- KEYS: running.
-- ARGV: lease expiry (epoch s)
-- Result: how many runs moved.

if redis.call('TYPE', KEYS[1]).ok ~= 'set' then return 0 end
local ids = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[1], id) end
return #ids
