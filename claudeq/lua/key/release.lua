-- RELEASE (worker/store/concurrency_keys.py): a run lets go of its concurrency key; the best-ranked waiters that
-- now have room are named, for the worker to send (docs/jobs.md#concurrency-keys).
-- KEYS: `running` (sorted set job -> hold expiry), `waiters` (sorted set job -> rank).
-- ARGV: `job`: its id, `limit`, `now` (epoch s).
-- Result: the waiters to wake, best first (as many as the key has room for).

local running = KEYS[1]
local waiters = KEYS[2]
local job = ARGV[1]
local limit = tonumber(ARGV[2])
local now = ARGV[3]

redis.call('ZREM', running, job)
redis.call('ZREM', waiters, job)
redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
local free = limit - redis.call('ZCARD', running)
if free <= 0 then return {} end
return redis.call('ZRANGE', waiters, 0, free - 1)
