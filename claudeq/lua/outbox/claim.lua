-- CLAIM (worker/background/notifier.py): up to `limit` jobs whose end notifications are due, each moved a lease ahead,
-- so no other notifier takes it while this one delivers, and a notifier that dies leaves it due again when the lease
-- ends.
-- KEYS: `outbox`.
-- ARGV: `now_s`, `limit`, `lease_until_s`.
-- Result: the job ids taken.

local outbox = KEYS[1]
local now_s = ARGV[1]
local limit = tonumber(ARGV[2])
local lease_until_s = ARGV[3]

local ids = redis.call('ZRANGEBYSCORE', outbox, '-inf', now_s, 'LIMIT', 0, limit)
for _, id in ipairs(ids) do redis.call('ZADD', outbox, 'XX', lease_until_s, id) end
return ids
