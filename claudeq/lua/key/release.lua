-- RELEASE (worker/store/concurrency_keys.py): a run lets go of its concurrency key; the best-ranked waiters that
-- now have room are named, for the worker to send (docs/jobs.md#concurrency-keys).
-- KEYS: running (sorted set job -> hold expiry), waiters (sorted set job -> rank).
-- ARGV: job id, limit, now (epoch s).
-- Result: the waiters to wake, best first (as many as the key has room for).

local running, waiters = KEYS[1], KEYS[2]
redis.call('ZREM', running, ARGV[1])
redis.call('ZREM', waiters, ARGV[1])
redis.call('ZREMRANGEBYSCORE', running, '-inf', ARGV[3])
local free = tonumber(ARGV[2]) - redis.call('ZCARD', running)
if free <= 0 then return {} end
return redis.call('ZRANGE', waiters, 0, free - 1)
