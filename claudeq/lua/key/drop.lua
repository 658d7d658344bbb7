-- DROP (worker/store/concurrency_keys.py): take a job that no longer waits (it ended, or was cancelled while it
-- waited) out of a concurrency key's line.
-- KEYS: waiters (sorted set job -> rank).
-- ARGV: job id.
-- Result: 1 when it was in line, else 0.

return redis.call('ZREM', KEYS[1], ARGV[1])
