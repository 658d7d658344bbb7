-- CLAIM (worker/background/notifier.py): up to `limit` jobs whose end notifications are due, each moved a lease ahead, so no
-- other notifier takes it while this one delivers, and a notifier that dies leaves it due again when the lease ends.
-- KEYS: outbox.
-- ARGV: now_s, limit, lease_until_s.
-- Result: the job ids taken.

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], 'XX', ARGV[3], id) end
return ids
