-- SETTLE (worker/background/notifier.py): what a notifier's pass did for one job: its delivery log in the record (when the
-- record is still there: a log must not bring an expired record back as a stub), and the job's place in the outbox.
-- KEYS: job, outbox, outbox_dead.
-- ARGV: job_id, the notifications JSON, next_due_s ('' = nothing left to try: out of the outbox), dead ('1': one was
--       given up on, the job goes to the dead letters), now_s, the entry id of the last event its webhook was sent
--       ('' = unchanged).
-- Result: 1.

if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'notifications', ARGV[2])
  if ARGV[6] and ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'webhook_cursor', ARGV[6]) end
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
if ARGV[4] == '1' then redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1]) end
return 1
