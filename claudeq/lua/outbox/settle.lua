-- SETTLE (worker/background/notifier.py): what a notifier's pass did for one job: its delivery log in the record (when
-- the record is still there: a log must not bring an expired record back as a stub), and the job's place in the outbox.
-- KEYS: `job`, `outbox`, `outbox_dead`.
-- ARGV: `job_id`, `notifications` (JSON), `next_due_s` ('' = nothing left to try: out of the outbox), `dead` ('1': one
--       was given up on, the job goes to the dead letters), `now_s`, `cursor`: the entry id of the last event its
--       webhook was sent ('' = unchanged).
-- Result: 1.

local job = KEYS[1]
local outbox = KEYS[2]
local outbox_dead = KEYS[3]
local job_id = ARGV[1]
local notifications = ARGV[2]
local next_due_s = ARGV[3]
local dead = ARGV[4]
local now_s = ARGV[5]
local cursor = ARGV[6]

if redis.call('EXISTS', job) == 1 then
  redis.call('HSET', job, 'notifications', notifications)
  if cursor and cursor ~= '' then redis.call('HSET', job, 'webhook_cursor', cursor) end
end
if next_due_s == '' then
  redis.call('ZREM', outbox, job_id)
else
  redis.call('ZADD', outbox, next_due_s, job_id)
end
if dead == '1' then redis.call('ZADD', outbox_dead, now_s, job_id) end
return 1
