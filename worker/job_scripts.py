"""Lua scripts for the job transitions only workers run: claim, heartbeat, fenced write, promote, recover, resend.

A run may write only while the fence it was given still matches (a paused worker whose lease was taken over must not
overwrite). The idempotency key's expiry follows its job's (see claudeq/job_scripts.py).
"""

from __future__ import annotations

from claudeq.account_scripts import ACQUIRE_FN, ADMISSION
from claudeq.job_scripts import COMPACT_EVENTS, COUNT_FINISHED, PACK_EVENTS
from claudeq.tenant_scripts import SETTLE_FN

# The lease of a running job is its score in the `running` sorted set: when it expires (epoch s, the claiming or
# beating worker's clock; worker clocks must agree within a lease TTL less a heartbeat interval). The job hash's
# `fence` says whose run it is: a claim raises it, and every write of a run checks it.

# KEYS: job, queued, running. ARGV: job_id, worker, lease expiry (epoch s), now_iso, now_s
# -> {result, fence, first, record, cancelled}: first = 1 on the job's first claim ever (its queue wait ends here);
# record = the job hash as it was before the claim (flat field/value list) and cancelled = 1 when the cancel flag
# (the record's `cancel` field) is set, so the worker needs no second round trip before its first attempt.
# One HGETALL reads status, fence, started_at and the flag too: a claim costs 4 commands inside Redis.
CLAIM = """
local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then return {'missing', 0} end
local cur = {}
for i = 1, #flat, 2 do cur[flat[i]] = flat[i + 1] end
local status = cur['status']
if not status then return {'missing', 0} end
if status == 'running' then
  local expiry = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
  if expiry and expiry > tonumber(ARGV[5]) then return {'busy', 0} end
  return {'orphan', 0}
end
if status ~= 'queued' then return {status, 0} end
local fence = (tonumber(cur['fence']) or 0) + 1
local first = 0
if cur['started_at'] then
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2], 'fence', fence)
else
  first = 1
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2], 'fence', fence, 'started_at', ARGV[4])
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return {'ok', fence, first, flat, cur['cancel'] and 1 or 0}
"""

# KEYS: job, running, then the sorted sets that hold the run with an expiry (its account slot first, then its
# tenant's runs). ARGV: fence, job_id, expiry_s, worker.
# -> {ours, held, cancelled}: the lease extended (0: the fence and worker no longer hold the running job, nothing
# touched; a lease that expired with nobody recovering the job meanwhile is still ours); whether the first set still
# held the run (its expiry moved; 1 when there is none); whether the cancel flag is set (the record's `cancel`). One
# round trip per heartbeat for the lease, the slot, the tenant's run and the missed-cancel check.
HEARTBEAT = """
local cur = redis.call('HMGET', KEYS[1], 'fence', 'status', 'cancel', 'worker')
if cur[1] ~= ARGV[1] or cur[2] ~= 'running' or cur[4] ~= ARGV[4] then return {0, 0, 0} end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
local held = 1
for i = 3, #KEYS do
  local changed = redis.call('ZADD', KEYS[i], 'XX', 'CH', ARGV[3], ARGV[2])
  if i == 3 then held = changed end
end
return {1, held, cur[3] and 1 or 0}
"""

# KEYS: job, running, queued, deferred, events ('' = the job has no stream: a terminal write need not read one; the
#       caller knows when no event of the job ever went to one)
# ARGV: job_id, fence, new_status ('' = unchanged), ttl_s, score (ready time / send time), finished_counts_prefix,
#       n_events, events_maxlen, now_ms, on_cancel, then n_events event JSONs, then field, value, ...
# The events (what the run emitted since its last append, then the status's own: a terminal, `deferred` or
# `requeued` one) go in with the status, under the same fence check: a follower that sees the status finds its
# events, and a worker that lost the job appends nothing. A terminal write puts them straight into the record's
# compacted `events` (after the stream's entries, with ids after the last one) instead of the stream it deletes.
# on_cancel ('' for a write to no status or a terminal one): for a write to `queued` or `deferred`, what the job ends
# with instead when its cancel flag is set (a cancel that came while it ran and nothing stopped the run yet, e.g.
# between the claim and a deferral): the JSON list [cancelled event, error JSON, finished_at, how many of the
# n_events at the end are the status's own (dropped)]. The job is then `cancelled` at once, like a cancel of a
# queued or deferred job, and the write answers 2 (docs/architecture.md#cancel-and-shutdown).
_WRITE_FN = (
    COUNT_FINISHED
    + PACK_EVENTS
    + """
local function write(KEYS, ARGV)
  local cur = redis.call('HMGET', KEYS[1], 'fence', 'status', 'idem', 'cancel')
  if cur[1] ~= ARGV[2] or cur[2] ~= 'running' then
    return 0
  end
  local n = tonumber(ARGV[7])
  local new = ARGV[3]
  local fields = {}
  for i = 11 + n, #ARGV do fields[#fields + 1] = ARGV[i] end
  local events, first, last = ARGV, 11, 10 + n
  local answer = 1
  if cur[4] and ARGV[10] ~= '' then
    -- cancelled while it ran: it ends now instead of waiting (`ready_at` is a deferral's, not a cancelled job's)
    local alt = cjson.decode(ARGV[10])
    new, answer = 'cancelled', 2
    local kept = {}
    for i = 1, #fields, 2 do
      if fields[i] ~= 'ready_at' then kept[#kept + 1], kept[#kept + 2] = fields[i], fields[i + 1] end
    end
    fields = kept
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] =
      'error', alt[2], 'finished_at', alt[3]
    events = {}
    for i = 11, 10 + n - alt[4] do events[#events + 1] = ARGV[i] end
    events[#events + 1] = alt[1]
    first, last = 1, #events
    redis.call('HDEL', KEYS[1], 'ready_at')
  end
  local terminal = new ~= '' and new ~= 'queued' and new ~= 'deferred'
  if not terminal then
    for i = first, last do redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[8], '*', 'event', events[i]) end
  end
  if new == '' then
    if #fields > 0 then redis.call('HSET', KEYS[1], unpack(fields)) end
    return 1
  end
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = new
  redis.call('ZREM', KEYS[2], ARGV[1])  -- out of `running`: its lease goes with it
  if new == 'queued' then
    redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
  elseif new == 'deferred' then
    redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
  else
    local packed = pack_events(KEYS[5], events, first, last, tonumber(ARGV[9]))
    if packed then
      fields[#fields + 1] = 'events'
      fields[#fields + 1] = packed
    end
    count_finished(ARGV[6], new, ARGV[4], tonumber(ARGV[9]) / 1000)
    if KEYS[5] ~= '' then redis.call('DEL', KEYS[5]) end
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    if cur[3] then redis.call('EXPIRE', cur[3], ARGV[4]) end
    if cur[4] then redis.call('HDEL', KEYS[1], 'cancel') end
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  return answer
end
"""
)

WRITE = _WRITE_FN + "return write(KEYS, ARGV)\n"

# KEYS: WRITE's five, then the run's account slot: slots, account hash, its four waiting lines; then the spend and
# reserved hashes its last attempt's cost counts against (`settle` in claudeq/tenant_scripts.py: none, or a pair or
# two); then the sorted sets the finished job leaves (its tenants' active-job index).
# ARGV: RELEASE's (minus the job id): job_key_prefix, now_s, max_concurrency, expiry_s, predictive, ramp rate,
#       jitter_s; then how many spend keys there are and settle's eight arguments ('' each when none); then WRITE's.
# -> {0} when the fence no longer holds the job (nothing written, released or counted: the new owner may hold this
# very slot, and the caller counts the spend itself), else {1, ids...}: WRITE, the attempt's spend counted, the slot
# freed and handed to the best waiters (`release` in claudeq/account_scripts.py: the ids, now queued, whose messages
# the caller sends), the job out of the index. A job's end in one round trip instead of four.
FINISH = (
    ADMISSION
    + SETTLE_FN
    + _WRITE_FN
    + """
local ns = tonumber(ARGV[8])
local wargv = {unpack_(ARGV, 17)}
if write(KEYS, wargv) == 0 then return {0} end
if ns > 0 then settle({unpack_(KEYS, 12, 11 + ns)}, ARGV, 9) end
local out = {1}
release(wargv[1], KEYS[6], KEYS[7], {KEYS[8], KEYS[9], KEYS[10], KEYS[11]}, tonumber(ARGV[3]), ARGV[4],
        tonumber(ARGV[2]), ARGV[1], {KEYS[4], KEYS[3]}, {ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]}, out)
for i = 12 + ns, #KEYS do redis.call('ZREM', KEYS[i], wargv[1]) end
return out
"""
)

# KEYS: ACQUIRE's six (slots, account hash, its four lines), then WRITE's five. ARGV: ACQUIRE's eleven, then WRITE's
# (a write that moves no status and brings no event: the attempt's start, its account and attempts).
# -> ACQUIRE's answer, and when it is 1 the attempt's start is written under the run's fence in the same step; -9:
# the slot was taken but the fence no longer holds the job (nothing written; the slot is left to expire: the new
# owner may hold this very slot, members being job ids). An attempt's start in one round trip instead of two.
START = (
    ADMISSION
    + ACQUIRE_FN
    + _WRITE_FN
    + """
local got = acquire({unpack_(KEYS, 1, 6)}, {unpack_(ARGV, 1, 11)})
if got ~= 1 then return got end
if write({unpack_(KEYS, 7)}, {unpack_(ARGV, 12)}) == 0 then return -9 end
return 1
"""
)

# KEYS: job, events. ARGV: fence, events_maxlen, event JSON, ... -> the last entry id, or false when `fence` no
# longer holds the running job (the run was taken over, or the job moved on): a superseded run's events are refused.
# Several events of a run go in one call (the worker batches what a run emits within a few milliseconds).
APPEND = """
local cur = redis.call('HMGET', KEYS[1], 'fence', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= 'running' then
  return false
end
local id = false
for i = 3, #ARGV do id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'event', ARGV[i]) end
return id
"""

# KEYS: deferred, job, queued. ARGV: job_id, now_s (a due limit; '+inf' promotes regardless of ready time)
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
return 1
"""

# KEYS: job, running, queued, events.
# ARGV: job_id, fence, now_s, event_json ('' = none), events_maxlen, new_status ('queued' | 'failed'), ttl_s,
#       finished_counts_prefix, on_cancel, field, value, ... (no fields: status only)
# A running job whose lease expired (its worker died): back to queued with the caller's attempt record — or, when it
# has lost its worker too often, `failed` (poisoned) like any terminal write — and its event, in one step (a new
# owner's events always come after it). on_cancel ('' with `failed`): what a job whose cancel flag is set ends with
# instead of `queued` (a cancel that came while it ran is not lost with its worker): the JSON list [cancelled event,
# error JSON, finished_at]; the job is then `cancelled` and the answer 2.
RECOVER = (
    COUNT_FINISHED
    + COMPACT_EVENTS
    + """
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence', 'cancel')
local expiry = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if cur[1] ~= 'running' or cur[2] ~= ARGV[2] or (expiry and expiry > tonumber(ARGV[3])) then
  if cur[1] ~= 'running' then redis.call('ZREM', KEYS[2], ARGV[1]) end
  return 0
end
local new, event, answer = ARGV[6], ARGV[4], 1
if #ARGV >= 11 then redis.call('HSET', KEYS[1], unpack(ARGV, 10)) end
if new == 'queued' and cur[3] and ARGV[9] ~= '' then
  local alt = cjson.decode(ARGV[9])
  new, event, answer = 'cancelled', alt[1], 2
  redis.call('HSET', KEYS[1], 'error', alt[2], 'finished_at', alt[3])
end
if event ~= '' then redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'event', event) end
redis.call('HSET', KEYS[1], 'status', new)
redis.call('ZREM', KEYS[2], ARGV[1])
if new == 'queued' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
else
  count_finished(ARGV[8], new, ARGV[7])
  compact_events(KEYS[1], KEYS[4])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('HDEL', KEYS[1], 'cancel')
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[7]) end
end
return answer
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

# KEYS: running. ARGV: lease expiry (epoch s). A `running` set of an earlier claudeq becomes the sorted set, each run
# scored with a fresh lease (WorkerJobStore.upgrade_running) -> how many runs moved.
UPGRADE_RUNNING = """
if redis.call('TYPE', KEYS[1]).ok ~= 'set' then return 0 end
local ids = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[1], id) end
return #ids
"""
