-- CANCEL (JobStore): a queued or deferred job ends `cancelled` now, with its event; a running job gets the cancel
-- flag: the record's `cancel` field (the claim and the heartbeat read it with what they read anyway; it survives a
-- missed pub/sub wake-up), dropped when the job ends.
-- KEYS: job, deferred, queued, events, outbox (lib/notify_end.lua), waiting (a waiting job is cancelled like a queued
--       one; its dependents: lib/release_dependents.lua).
-- ARGV: job_id, now_iso, ttl_s, error_json, event_json, events_maxlen, finished_counts_prefix
-- Result: 'missing' (no record), 'cancelled', 'running' (flagged), or the job's status (already finished).

--!include lib/count_finished.lua
--!include lib/compact_events.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua

local cur = redis.call('HMGET', KEYS[1], 'status', 'notify', 'dependents')
local status = cur[1]
if not status then return 'missing' end
if status == 'queued' or status == 'deferred' or status == 'waiting' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[2], 'error', ARGV[4])
  -- a flag set while it ran (then requeued) has nothing left to stop
  redis.call('HDEL', KEYS[1], 'ready_at', 'cancel')
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  if KEYS[6] then redis.call('ZREM', KEYS[6], ARGV[1]) end
  local turns = redis.call('HGET', KEYS[1], 'turns')
  if turns then redis.call('ZREM', turns, ARGV[1]) end  -- a cancelled turn never holds up the next one
  -- The event goes in with the status, so a follower that sees `cancelled` also finds the event.
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'event', ARGV[5])
  compact_events(KEYS[1], KEYS[4])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[3]) end
  count_finished(ARGV[7], 'cancelled', ARGV[3])
  notify_end(KEYS[5], ARGV[1], cur[2])
  release_dependents(KEYS[1], ARGV[1], 'cancelled', cur[3], KEYS[6], KEYS[2])
  return 'cancelled'
end
if status == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  return 'running'
end
return status
