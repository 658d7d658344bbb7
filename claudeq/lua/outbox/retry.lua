-- RETRY (`claudeq webhooks retry`): a dead-lettered job's notifications tried again: its given-up ones pending with
-- no tries counted, the job out of the dead letters and due now.
-- KEYS: `job`, `outbox`, `outbox_dead`.
-- ARGV: `job_id`, `now_s`.
-- Result: how many notifications go again (0: none was dead), -1 no record.

local job = KEYS[1]
local outbox = KEYS[2]
local outbox_dead = KEYS[3]
local job_id = ARGV[1]
local now_s = ARGV[2]

local raw = redis.call('HGET', job, 'notifications')
if not raw then
  if redis.call('EXISTS', job) == 0 then
    redis.call('ZREM', outbox_dead, job_id)
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
redis.call('ZREM', outbox_dead, job_id)
if again == 0 then return 0 end
redis.call('HSET', job, 'notifications', cjson.encode(log))
redis.call('ZADD', outbox, now_s, job_id)
return again
