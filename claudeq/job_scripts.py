"""Lua scripts for the job transitions producers start: create and cancel. Each runs atomically inside Redis.

Status lives in the job hash's `status` field and the fencing token in `fence` (the scripts only workers run — claim,
heartbeat, fenced write, promote, recover, resend — are in claudeq/worker/job_scripts.py).

The idempotency key (`idem:{key}` in its tenant's scope, `Keys.idem`; named in the job hash's `idem` field) lives as
long as its job: it has no expiry until the job reaches a terminal state, then the job's retention. The scripts that
finish a job read that name from the hash, so claudeq needs a single Redis node (or a primary with replicas), not Redis
Cluster.
"""

from __future__ import annotations

#: Lua: add `n` to the counter `field` of hash `key`. A counter that is not an integer (damaged by hand or by another
#: program) starts again from `n` instead of failing the script: the counters are gauges, the statuses are the truth,
#: and a script that stops half-way keeps the writes it made before (Redis has no rollback), leaving a job half-moved
#: — a damaged `counts` hash once stopped every claim of the fleet.
BUMP = """
local function bump(key, field, n)
  local r = redis.pcall('HINCRBY', key, field, n)
  if type(r) == 'table' and r.err then redis.call('HSET', key, field, n) end
end
"""

#: Lua: count one more finished job of status `st` in the hash named `prefix .. st`, under the hour by whose end its
#: retention of `ttl` seconds is over (the exporter sums the hours still to come: O(hours), never O(jobs)). `now_s`:
#: the caller's clock (epoch s), else Redis's own TIME.
COUNT_FINISHED = (
    BUMP
    + """
local function count_finished(prefix, st, ttl, now_s)
  if not now_s then now_s = tonumber(redis.call('TIME')[1]) end
  bump(prefix .. st, math.floor((now_s + tonumber(ttl)) / 3600) + 1, 1)
end
"""
)

#: Lua: move a finished job's event stream into its record (`events`: a JSON list of [entry id, event JSON]) and
#: delete the stream: a stream costs ~4.7 KB however few its events, the field about their JSON size, and it expires
#: with the record. JobStore.read_events reads both.
COMPACT_EVENTS = """
local function compact_events(job, stream)
  local entries = redis.call('XRANGE', stream, '-', '+')
  if #entries == 0 then return end
  local packed = {}
  for i, entry in ipairs(entries) do packed[i] = {entry[1], entry[2][2]} end
  redis.call('HSET', job, 'events', cjson.encode(packed))
  redis.call('DEL', stream)
end
"""

#: Lua: the compacted `events` of a job that finishes now: the stream's entries, then `argv[from..to]` (events the
#: finishing write brings, never written to the stream) with entry ids after the stream's last one (`now_ms`-n, or
#: the last id's millisecond when the clock is behind it). Returns the JSON for the record's `events` field (a list of
#: [entry id, event JSON], as COMPACT_EVENTS writes it), or nil when there is nothing. The caller deletes the stream.
#: `stream` '' = the job has none (nothing to read).
PACK_EVENTS = """
local function pack_events(stream, argv, from, to, now_ms)
  local entries = {}
  if stream ~= '' then entries = redis.call('XRANGE', stream, '-', '+') end
  if #entries == 0 and to < from then return nil end
  local packed = {}
  local last_ms, last_seq = 0, -1
  for i, entry in ipairs(entries) do packed[i] = {entry[1], entry[2][2]} end
  if #entries > 0 then
    local id = entries[#entries][1]
    local dash = string.find(id, '-', 1, true)
    last_ms, last_seq = tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
  end
  local ms, seq = math.floor(now_ms), 0
  if ms <= last_ms then ms, seq = last_ms, last_seq + 1 end
  for i = from, to do
    packed[#packed + 1] = {string.format('%d-%d', ms, seq), argv[i]}
    seq = seq + 1
  end
  return cjson.encode(packed)
end
"""

#: Lua: give job `id` (hash `job`) the next turn number of a conversation (sorted set `waiters` scored by turn
#: number, counter `seq`) and record both in the job hash (`turn`, and `turns` = the waiters key, read back by
#: CANCEL). A counter that expired restarts after the highest number still waiting, so order never goes backwards.
NEXT_TURN_FN = """
local function next_turn(job, waiters, seq, id, ttl)
  if redis.call('EXISTS', seq) == 0 then
    local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    redis.call('SET', seq, last[2] or 0)
  end
  local turn = redis.call('INCR', seq)
  redis.call('ZADD', waiters, turn, id)
  redis.call('HSET', job, 'turn', turn, 'turns', waiters)
  redis.call('EXPIRE', waiters, ttl)
  redis.call('EXPIRE', seq, ttl)
  return turn
end
"""

#: Lua: add job `id` created at `created_ms` to a tenant's job index (`Keys.tenant_index`) and drop up to `n` ids of
#: expired jobs from its old end: entries created before `cutoff_ms` (now less the retention) whose record is gone.
#: Each new entry takes up to `n` (2) expired ones out, so the index shrinks back as fast as jobs expire without a
#: pass of its own; a job that outlives the retention while active keeps its entry (and, at the very end, holds
#: back the entries behind it until it expires).
INDEX_FN = """
local function index_job(index, id, created_ms, prefix, cutoff_ms, n)
  if id ~= '' then redis.call('ZADD', index, created_ms, id) end
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', cutoff_ms, 'LIMIT', 0, n)
  for _, gone in ipairs(old) do
    if redis.call('EXISTS', prefix .. gone) == 0 then redis.call('ZREM', index, gone) end
  end
end
"""

#: KEYS tenant index; ARGV job key prefix, cutoff ms, n: trim a tenant's index after a batch added to it with ZADD.
TRIM_INDEX = INDEX_FN + "index_job(KEYS[1], '', 0, ARGV[1], ARGV[2], tonumber(ARGV[3]))\n"

# KEYS: job, jobs, queued, idem ('' = none), conversation waiters ('' = none), conversation seq, tenant index ('' =
# none).
# ARGV: job_id, created_ms, now_s, job_key_prefix, conversation ttl_s, index cutoff ms, field, value, ...
# A conversation turn is numbered here, at submit: the turn lock (claudeq/conversations.py) follows that order.
# A batch submit writes a job with neither (no idempotency key, no conversation) as the same three commands
# without the script, its index entries in one ZADD per set with the rest of its batch (JobStore.create_many).
CREATE = (
    NEXT_TURN_FN
    + INDEX_FN
    + """
if KEYS[4] ~= '' then
  local existing = redis.call('GET', KEYS[4])
  if existing and redis.call('EXISTS', ARGV[4] .. existing) == 1 then
    return {0, existing}
  end
  -- No expiry while the job is alive; finishing it gives the key the job's retention.
  redis.call('SET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[1], 'idem', KEYS[4])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
if KEYS[5] ~= '' then next_turn(KEYS[1], KEYS[5], KEYS[6], ARGV[1], ARGV[5]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
if KEYS[7] ~= '' then index_job(KEYS[7], ARGV[1], ARGV[2], ARGV[4], ARGV[6], 2) end
return {1, ARGV[1]}
"""
)

# KEYS: job, deferred, queued, events.
# ARGV: job_id, now_iso, ttl_s, error_json, event_json, events_maxlen, finished_counts_prefix
# A running job gets the cancel flag: the record's `cancel` field (the claim and the heartbeat read it with what they
# read anyway; it survives a missed pub/sub wake-up), dropped when the job ends.
CANCEL = (
    COUNT_FINISHED
    + COMPACT_EVENTS
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 'missing' end
if status == 'queued' or status == 'deferred' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[2], 'error', ARGV[4])
  -- a flag set while it ran (then requeued) has nothing left to stop
  redis.call('HDEL', KEYS[1], 'ready_at', 'cancel')
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  local turns = redis.call('HGET', KEYS[1], 'turns')
  if turns then redis.call('ZREM', turns, ARGV[1]) end  -- a cancelled turn never holds up the next one
  -- The event goes in with the status, so a follower that sees `cancelled` also finds the event.
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'event', ARGV[5])
  compact_events(KEYS[1], KEYS[4])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[3]) end
  count_finished(ARGV[7], 'cancelled', ARGV[3])
  return 'cancelled'
end
if status == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  return 'running'
end
return status
"""
)
