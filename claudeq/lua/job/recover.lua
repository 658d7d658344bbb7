-- RECOVER (WorkerJobStore): a running job whose lease expired (its worker died): back to queued with the caller's
-- attempt record — or, when it has lost its worker too often, `failed` (poisoned) like any terminal write — and its
-- event, in one step (a new owner's events always come after it).
-- KEYS: job, running, queued, events, outbox (lib/notify_end.lua), deferred, waiting (lib/release_dependents.lua).
-- ARGV: job_id, fence, now_s, event_json ('' = none), events_maxlen, new_status ('queued' | 'failed'), ttl_s,
--       finished_counts_prefix, on_cancel, field, value, ... (no fields: status only)
-- on_cancel ('' with `failed`): what a job whose cancel flag is set ends with instead of `queued` (a cancel that came
-- while it ran is not lost with its worker): the JSON list [cancelled event, error JSON, finished_at].
-- Result: a Write code (claudeq/lua/results.py): LOST (nothing to recover: not running, another fence, or the
--   lease still live), WRITTEN (recovered), CANCELLED (instead).

--!include lib/count_finished.lua
--!include lib/compact_events.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua

local cur = redis.call('HMGET', KEYS[1], 'status', 'fence', 'cancel', 'notify', 'dependents')
local expiry = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if cur[1] ~= 'running' or cur[2] ~= ARGV[2] or (expiry and expiry > tonumber(ARGV[3])) then
  if cur[1] ~= 'running' then redis.call('ZREM', KEYS[2], ARGV[1]) end
  return {{Write.LOST}}
end
local new, event, answer = ARGV[6], ARGV[4], {{Write.WRITTEN}}
if #ARGV >= 11 then redis.call('HSET', KEYS[1], unpack(ARGV, 10)) end
if new == 'queued' and cur[3] and ARGV[9] ~= '' then
  local alt = cjson.decode(ARGV[9])
  new, event, answer = 'cancelled', alt[1], {{Write.CANCELLED}}
  redis.call('HSET', KEYS[1], 'error', alt[2], 'finished_at', alt[3])
end
if event ~= '' then redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'event', event) end
redis.call('HSET', KEYS[1], 'status', new)
redis.call('ZREM', KEYS[2], ARGV[1])
if new == 'queued' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
else
  count_finished(ARGV[8], new, ARGV[7])
  notify_end(KEYS[5], ARGV[1], cur[4], tonumber(ARGV[3]))
  release_dependents(KEYS[1], ARGV[1], new, cur[5], KEYS[7], KEYS[6], tonumber(ARGV[3]))
  compact_events(KEYS[1], KEYS[4])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('HDEL', KEYS[1], 'cancel')
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[7]) end
end
return answer
