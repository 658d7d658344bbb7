-- TAKE (worker/store/concurrency_keys.py): a run of a job under a concurrency key, at most `limit` at once
-- fleet-wide; waiters go in rank order (docs/jobs.md#concurrency-keys).
-- KEYS: `running` (sorted set job -> hold expiry), `waiters` (sorted set job -> rank).
-- ARGV: `job`: its id, `limit`, `expiry`: the hold's (epoch s), `now` (epoch s), `rank`, `peek` ('1': only say
--       whether it would be taken).
-- Result: {1, runs holding the key} taken (or held already: its expiry moved); {0, runs holding the key, waiters
--   ranked before it while the key has room...} it waits in line (those waiters are to be woken or dropped).

local running = KEYS[1]
local waiters = KEYS[2]
local job = ARGV[1]
local limit = tonumber(ARGV[2])
local expiry = ARGV[3]
local now = ARGV[4]
local rank = ARGV[5]
local peek = ARGV[6]

peek = peek == '1'
redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
if redis.call('ZSCORE', running, job) then
  if not peek then
    redis.call('ZADD', running, expiry, job)
    redis.call('ZREM', waiters, job)
  end
  return {1, redis.call('ZCARD', running)}
end
local held = redis.call('ZCARD', running)
local free = limit - held
local ahead = redis.call('ZRANGEBYSCORE', waiters, '-inf', '(' .. rank, 'LIMIT', 0, math.max(free, 1))
local before = {}
for _, other in ipairs(ahead) do
  if other ~= job then before[#before + 1] = other end
end
if free > 0 and #before < free then
  if not peek then
    redis.call('ZADD', running, expiry, job)
    redis.call('ZREM', waiters, job)
  end
  return {1, held + 1}
end
if not peek then redis.call('ZADD', waiters, rank, job) end
local out = {0, held}
if free > 0 then
  for _, other in ipairs(before) do out[#out + 1] = other end
end
return out
