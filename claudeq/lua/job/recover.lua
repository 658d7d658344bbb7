-- RECOVER (WorkerJobStore): a running job whose lease expired (its worker died): back to queued with the caller's
-- attempt record — or, when it has lost its worker too often, `failed` (poisoned) like any terminal write — and its
-- event, in one step (a new owner's events always come after it).
-- KEYS: `job`, `running`, `queued`, `stream`, `outbox` (lib/notify_end.lua), `deferred`, `waiting`
--       (lib/release_dependents.lua).
-- ARGV: `job_id`, `fence`, `now_s`, `event_json` ('' = none), `events_maxlen`, `new_status` ('queued' | 'failed'),
--       `ttl_s`, `finished_counts_prefix`, `on_cancel`, `fields`: field, value, ... (none: status only)
-- on_cancel ('' with 'failed'): what a job whose cancel flag is set ends with instead of `queued` (a cancel that came
-- while it ran is not lost with its worker): the JSON list [cancelled event, error JSON, finished_at].
-- Result: a Write code (claudeq/lua/results.py): LOST (nothing to recover: not running, another fence, or the
--   lease still live), WRITTEN (recovered), CANCELLED (instead).

--!include lib/count_finished.lua
--!include lib/compact_events.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua
--!include lib/args.lua

local job = KEYS[1]
local running = KEYS[2]
local queued = KEYS[3]
local stream = KEYS[4]
local outbox = KEYS[5]
local deferred = KEYS[6]
local waiting = KEYS[7]
local job_id = ARGV[1]
local fence = ARGV[2]
local now_s = ARGV[3]
local event_json = ARGV[4]
local events_maxlen = ARGV[5]
local new_status = ARGV[6]
local ttl_s = ARGV[7]
local finished_counts_prefix = ARGV[8]
local on_cancel = ARGV[9]
local fields = args_list(ARGV, 10)

local cur = redis.call('HMGET', job, 'status', 'fence', 'cancel', 'notify', 'dependents')
local expiry = tonumber(redis.call('ZSCORE', running, job_id))
if cur[1] ~= 'running' or cur[2] ~= fence or (expiry and expiry > tonumber(now_s)) then
  if cur[1] ~= 'running' then redis.call('ZREM', running, job_id) end
  return {{Write.LOST}}
end
local new, event, answer = new_status, event_json, {{Write.WRITTEN}}
if #fields >= 2 then redis.call('HSET', job, unpack(fields)) end
if new == 'queued' and cur[3] and on_cancel ~= '' then
  local alt = cjson.decode(on_cancel)
  new, event, answer = 'cancelled', alt[1], {{Write.CANCELLED}}
  redis.call('HSET', job, 'error', alt[2], 'finished_at', alt[3])
end
if event ~= '' then redis.call('XADD', stream, 'MAXLEN', '~', events_maxlen, '*', 'event', event) end
redis.call('HSET', job, 'status', new)
redis.call('ZREM', running, job_id)
if new == 'queued' then
  redis.call('ZADD', queued, now_s, job_id)
else
  count_finished(finished_counts_prefix, new, ttl_s)
  notify_end(outbox, job_id, cur[4], tonumber(now_s))
  release_dependents(job, job_id, new, cur[5], waiting, deferred, tonumber(now_s))
  compact_events(job, stream)
  redis.call('EXPIRE', job, ttl_s)
  redis.call('HDEL', job, 'cancel')
  local idem = redis.call('HGET', job, 'idem')
  if idem then redis.call('EXPIRE', idem, ttl_s) end
end
return answer
