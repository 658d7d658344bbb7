-- DROP (worker/store/concurrency_keys.py): take a job that no longer waits (it ended, or was cancelled while it
-- waited) out of a concurrency key's line.
-- KEYS: `waiters` (sorted set job -> rank).
-- ARGV: `job`: its id.
-- Result: 1 when it was in line, else 0.

local waiters = KEYS[1]
local job = ARGV[1]

return redis.call('ZREM', waiters, job)
