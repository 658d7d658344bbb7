"""Lua scripts for the job transitions only workers run: claim, heartbeat, fenced write, promote, recover, resend.

A run may write only while the fence it was given still matches (a paused worker whose lease was taken over must not
overwrite). The idempotency key's expiry follows its job's (see claudeq/job_scripts.py).
"""

from __future__ import annotations

from claudeq.job_scripts import COMPACT_EVENTS, COUNT_FINISHED

# KEYS: job, lease, queued, running, counts. ARGV: job_id, worker, lease_ttl_ms, now_iso
# -> {result, fence, first}: first = 1 on the job's first claim ever (its queue wait ends here)
CLAIM = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing', 0} end
if status == 'running' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {'busy', 0} end
  return {'orphan', 0}
end
if status ~= 'queued' then return {status, 0} end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2])
local first = redis.call('HSETNX', KEYS[1], 'started_at', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2] .. '|' .. fence, 'PX', ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'queued', -1)
redis.call('HINCRBY', KEYS[5], 'running', 1)
return {'ok', fence, first}
"""

# KEYS: lease. ARGV: worker|fence, ttl_ms
HEARTBEAT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: job, lease, queued, running, deferred, events, cancel, counts
# ARGV: job_id, fence, new_status ('' = unchanged), ttl_s, score (ready time / send time), finished_counts_prefix,
#       event_json ('' = none), events_maxlen, field, value, ...
# The event (a terminal, `deferred` or `requeued` one) goes in with the status, under the same fence check: a
# follower that sees the status finds its event, and a worker that lost the job appends nothing.
WRITE = (
    COUNT_FINISHED
    + COMPACT_EVENTS
    + """
local cur = redis.call('HMGET', KEYS[1], 'fence', 'status')
if cur[1] ~= ARGV[2] or cur[2] ~= 'running' then
  return 0
end
if #ARGV >= 10 then redis.call('HSET', KEYS[1], unpack(ARGV, 9)) end
if ARGV[7] ~= '' then redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[8], '*', 'event', ARGV[7]) end
local new = ARGV[3]
if new == '' then return 1 end
redis.call('HSET', KEYS[1], 'status', new)
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('HINCRBY', KEYS[8], 'running', -1)
if new == 'queued' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
  redis.call('HINCRBY', KEYS[8], 'queued', 1)
elseif new == 'deferred' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
  redis.call('HINCRBY', KEYS[8], 'deferred', 1)
else
  count_finished(ARGV[6], new, ARGV[4])
  compact_events(KEYS[1], KEYS[6])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('DEL', KEYS[7])
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[4]) end
end
return 1
"""
)

# KEYS: job, events. ARGV: fence, event_json, events_maxlen -> the entry id, or false when `fence` no longer holds
# the running job (the run was taken over, or the job moved on): a superseded run's events are refused.
APPEND = """
local cur = redis.call('HMGET', KEYS[1], 'fence', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= 'running' then
  return false
end
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'event', ARGV[2])
"""

# KEYS: deferred, job, queued, counts. ARGV: job_id, now_s (a due limit; '+inf' promotes regardless of ready time)
PROMOTE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
if ARGV[2] ~= '+inf' and tonumber(score) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[2], 'status') ~= 'deferred' then return 0 end
redis.call('HSET', KEYS[2], 'status', 'queued')
redis.call('HDEL', KEYS[2], 'ready_at')
local now = redis.call('TIME')
redis.call('ZADD', KEYS[3], now[1], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'deferred', -1)
redis.call('HINCRBY', KEYS[4], 'queued', 1)
return 1
"""

# KEYS: job, lease, running, queued, counts, events, cancel.
# ARGV: job_id, fence, now_s, event_json ('' = none), events_maxlen, new_status ('queued' | 'failed'), ttl_s,
#       finished_counts_prefix, field, value, ... (no fields: status only)
# A running job whose lease expired (its worker died): back to queued with the caller's attempt record — or, when it
# has lost its worker too often, `failed` (poisoned) like any terminal write — and its event, in one step (a new
# owner's events always come after it).
RECOVER = (
    COUNT_FINISHED
    + COMPACT_EVENTS
    + """
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence')
if cur[1] ~= 'running' or cur[2] ~= ARGV[2] or redis.call('EXISTS', KEYS[2]) == 1 then
  if cur[1] ~= 'running' then redis.call('SREM', KEYS[3], ARGV[1]) end
  return 0
end
if #ARGV >= 10 then redis.call('HSET', KEYS[1], unpack(ARGV, 9)) end
if ARGV[4] ~= '' then redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'event', ARGV[4]) end
redis.call('HSET', KEYS[1], 'status', ARGV[6])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'running', -1)
if ARGV[6] == 'queued' then
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
  redis.call('HINCRBY', KEYS[5], 'queued', 1)
else
  count_finished(ARGV[8], ARGV[6], ARGV[7])
  compact_events(KEYS[1], KEYS[6])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('DEL', KEYS[7])
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[7]) end
end
return 1
"""
)

# KEYS: queued, job. ARGV: job_id, older_than_s, now_s. Claims a resend of an unclaimed queued job (once).
RESEND = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return 0 end
if redis.call('HGET', KEYS[2], 'status') ~= 'queued' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""
