-- RETRY (`claudeq webhooks retry`): a dead-lettered job's notifications tried again: its given-up ones pending with
-- no tries counted, the job out of the dead letters and due now.
-- KEYS: job, outbox, outbox_dead.
-- ARGV: job_id, now_s.
-- Result: how many notifications go again (0: none was dead), -1 no record.

local raw = redis.call('HGET', KEYS[1], 'notifications')
if not raw then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('ZREM', KEYS[3], ARGV[1])
    return -1
  end
  return 0
end
local log = cjson.decode(raw)
local again = 0
for _, n in ipairs(log) do
  if n['state'] == 'dead' then
    n['state'], n['attempts'] = 'pending', 0
    again = again + 1
  end
end
redis.call('ZREM', KEYS[3], ARGV[1])
if again == 0 then return 0 end
redis.call('HSET', KEYS[1], 'notifications', cjson.encode(log))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return again
