-- CANCEL (JobStore): a queued or deferred job ends `cancelled` now, with its event; a running job gets the cancel
-- flag: the record's 'cancel' field (the claim and the heartbeat read it with what they read anyway; it survives a
-- missed pub/sub wake-up), dropped when the job ends.
-- KEYS: `job`, `deferred`, `queued`, `stream`, `outbox` (lib/notify_end.lua), `waiting` (a waiting job is cancelled
--       like a queued one; its dependents: lib/release_dependents.lua).
-- ARGV: `job_id`, `now_iso`, `ttl_s`, `error_json`, `event_json`, `events_maxlen`, `finished_counts_prefix`
-- Result: 'missing' (no record), 'cancelled', 'running' (flagged), or the job's status (already finished).

--!include lib/count_finished.lua
--!include lib/compact_events.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua

local job = KEYS[1]
local deferred = KEYS[2]
local queued = KEYS[3]
local stream = KEYS[4]
local outbox = KEYS[5]
local waiting = KEYS[6]
local job_id = ARGV[1]
local now_iso = ARGV[2]
local ttl_s = ARGV[3]
local error_json = ARGV[4]
local event_json = ARGV[5]
local events_maxlen = ARGV[6]
local finished_counts_prefix = ARGV[7]

local cur = redis.call('HMGET', job, 'status', 'notify', 'dependents')
local status = cur[1]
if not status then return 'missing' end
if status == 'queued' or status == 'deferred' or status == 'waiting' then
  redis.call('HSET', job, 'status', 'cancelled', 'finished_at', now_iso, 'error', error_json)
  -- a flag set while it ran (then requeued) has nothing left to stop
  redis.call('HDEL', job, 'ready_at', 'cancel')
  redis.call('ZREM', deferred, job_id)
  redis.call('ZREM', queued, job_id)
  if waiting then redis.call('ZREM', waiting, job_id) end
  local turns = redis.call('HGET', job, 'turns')
  if turns then redis.call('ZREM', turns, job_id) end  -- a cancelled turn never holds up the next one
  -- The event goes in with the status, so a follower that sees `cancelled` also finds the event.
  redis.call('XADD', stream, 'MAXLEN', '~', events_maxlen, '*', 'event', event_json)
  compact_events(job, stream)
  redis.call('EXPIRE', job, ttl_s)
  local idem = redis.call('HGET', job, 'idem')
  if idem then redis.call('EXPIRE', idem, ttl_s) end
  count_finished(finished_counts_prefix, 'cancelled', ttl_s)
  notify_end(outbox, job_id, cur[2])
  release_dependents(job, job_id, 'cancelled', cur[3], waiting, deferred)
  return 'cancelled'
end
if status == 'running' then
  redis.call('HSET', job, 'cancel', '1')
  return 'running'
end
return status
