-- bump(key, field, n): add `n` to the counter `field` of hash `key`. A counter that is not an integer (damaged by
-- hand or by another program) starts again from `n` instead of failing the script: the counters are gauges, the
-- statuses are the truth, and a script that stops half-way keeps the writes it made before (Redis has no rollback),
-- leaving a job half-moved — a damaged `counts` hash once stopped every claim of the fleet.

local function bump(key, field, n)
  local r = redis.pcall('HINCRBY', key, field, n)
  if type(r) == 'table' and r.err then redis.call('HSET', key, field, n) end
end
