"""Lua scripts for the per-account semaphore and account state: each runs atomically inside Redis.

Times are epoch seconds passed in by the caller (every worker and the CLI use their own clock, as the job store
does). The account hash fields are described in claudeq/account_state.py.
"""

from __future__ import annotations

# Admission before exhaustion (the `held` rule; `claudeq.account_state.held` is the same rule in Python): with the
# last `remaining` the API reported for requests (`rq_rem`, window resetting at `rq_reset`, limit `rq_lim`) and
# tokens (`tk_rem`, `tk_reset`, `tk_lim`, about `tk_est` tokens per request), a new run is held back while the runs
# in flight (n) may use up what is left: left - n <= 0 requests, or left - n * tk_est <= 0 tokens. Once the window
# has reset, what is left is its limit.
_HELD = """
local function left(rem, reset, lim, now)
  if rem and reset and reset > now then return rem end
  return lim
end
local function held(hash, n, now)
  local f = redis.call('HMGET', hash, 'rq_rem', 'rq_reset', 'rq_lim', 'tk_rem', 'tk_reset', 'tk_lim', 'tk_est')
  local rq = left(tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), now)
  if rq and rq - n <= 0 then return true end
  local tk = left(tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), now)
  if tk and tk - n * (tonumber(f[7]) or 0) <= 0 then return true end
  return false
end
"""

# The waiting line (docs/architecture.md#the-waiting-line): the jobs waiting for a slot on an account are the sorted
# set `acct:{name}:waiters`, scored by rank (lower goes first: priority, then age; see worker/waiting_line.py). A slot
# that frees goes to the best waiter still `deferred`: `admit` puts that job in the semaphore itself (a handoff, with
# the slot's usual expiry) and promotes it in the same step (`deferred` -> `queued`, as PROMOTE in
# worker/job_scripts.py does), so no job that arrives meanwhile can take that slot and no other account's line hands
# the same job a second slot; the caller sends the named jobs' messages. Waiters no longer deferred (served by
# another account, cancelled, finished) are dropped on the way. `jk` = {deferred, queued, counts} keys.
_ADMIT = """
local function admit(waiters, slots, hash, max, expiry, now, job_prefix, jk, out)
  if redis.call('HGET', hash, 'state') == 'disabled' then return end
  local until_s = tonumber(redis.call('HGET', hash, 'cooldown_until') or '0') or 0
  if until_s > now then return end
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  while true do
    local n = redis.call('ZCARD', slots)
    if n >= max or held(hash, n, now) then return end
    local head = redis.call('ZRANGE', waiters, 0, 0)
    if #head == 0 then return end
    redis.call('ZREM', waiters, head[1])
    local job = job_prefix .. head[1]
    if redis.call('HGET', job, 'status') == 'deferred' then
      redis.call('ZADD', slots, expiry, head[1])
      redis.call('HINCRBY', hash, 'n:acquired', 1)
      redis.call('ZREM', jk[1], head[1])
      redis.call('HSET', job, 'status', 'queued')
      redis.call('HDEL', job, 'ready_at')
      redis.call('ZADD', jk[2], now, head[1])
      redis.call('HINCRBY', jk[3], 'deferred', -1)
      redis.call('HINCRBY', jk[3], 'queued', 1)
      out[#out + 1] = head[1]
    end
  end
end
"""

# KEYS: slots, account hash, waiters. ARGV: job_id, max_concurrency, expiry_s, now_s, rank ('' = none), job_key_prefix
# -> 1 acquired (or already held: ZADD refreshes, so a redelivery never takes two slots; a slot handed over by
#    `admit` is taken this way), 0 full, -1 disabled, -2 cooling, -3 held (see _HELD), -4 the free slots belong to
#    waiters ranked before this job (it waits in line). The account's state is checked here too, so a cooldown
#    written by another worker a moment ago is honoured even when the caller's snapshot was older.
ACQUIRE = (
    _HELD
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
if redis.call('HGET', KEYS[2], 'state') == 'disabled' then return -1 end
local until_s = tonumber(redis.call('HGET', KEYS[2], 'cooldown_until') or '0') or 0
if until_s > tonumber(ARGV[4]) then return -2 end
local n = redis.call('ZCARD', KEYS[1])
local free = tonumber(ARGV[2]) - n
if free <= 0 then return 0 end
if held(KEYS[2], n, tonumber(ARGV[4])) then return -3 end
if ARGV[5] ~= '' then
  -- Waiters still deferred and ranked strictly before this job have first call on the free slots.
  local ahead, offset = 0, 0
  while ahead < free do
    local e = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5], 'LIMIT', offset, 1)
    if #e == 0 then break end
    if e[1] == ARGV[1] then
      offset = offset + 1
    elseif redis.call('HGET', ARGV[6] .. e[1], 'status') == 'deferred' then
      ahead = ahead + 1
      offset = offset + 1
    else
      redis.call('ZREM', KEYS[3], e[1])
    end
  end
  if ahead >= free then return -4 end
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'n:acquired', 1)
return 1
"""
)

# KEYS: slots, waiters, account hash, deferred, queued, counts. ARGV: job_id, job_key_prefix, now_s,
# max_concurrency, expiry_s
# Frees the job's slot, then hands the free slots to the best waiters still `deferred` (`admit`) -> their ids, now
# queued: the caller sends their messages. A cooling or disabled account admits nobody.
RELEASE = (
    _HELD
    + _ADMIT
    + """
redis.call('ZREM', KEYS[1], ARGV[1])
local out = {}
admit(KEYS[2], KEYS[1], KEYS[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[3]), ARGV[2], {KEYS[4], KEYS[5], KEYS[6]},
      out)
return out
"""
)

# KEYS: slots, waiters, account hash, deferred, queued, counts. ARGV: job_key_prefix, now_s, max_concurrency,
# expiry_s
# The promoter's pass over an account: hand its free slots to its best waiters (after a cooldown ends, a hold
# lifts, or a slot expired) -> their ids, now queued: the caller sends their messages.
ADMIT = (
    _HELD
    + _ADMIT
    + """
local out = {}
admit(KEYS[2], KEYS[1], KEYS[3], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[2]), ARGV[1], {KEYS[4], KEYS[5], KEYS[6]},
      out)
return out
"""
)

# KEYS: account hash. ARGV: until_s, reason
# Cooling never shortens a cooldown already in place (a later reset seen by another worker wins).
COOL = """
local current = tonumber(redis.call('HGET', KEYS[1], 'cooldown_until') or '0') or 0
local new = tonumber(ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new <= current then return 0 end
redis.call('HSET', KEYS[1], 'cooldown_until', ARGV[1], 'cooldown_reason', ARGV[2])
return 1
"""

# KEYS: account hash. ARGV: state, warn_window
# A rate-limit signal sets ok/warning but never overwrites `disabled` (only an operator enables).
SET_STATE = """
if redis.call('HGET', KEYS[1], 'state') == 'disabled' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'warn_window', ARGV[2])
return 1
"""

# KEYS: deferred, queued, counts, then per account: waiters, slots, account hash. ARGV: job_id, rank,
# job_key_prefix, now_s, expiry_s, then per account: max_concurrency
# Puts a deferred job in each account's waiting line at its rank (a job already in line keeps its place), then lets
# each account admit: a slot may have been released between the caller's failed acquire and this call, or the
# caller yielded to better-ranked waiters that nobody has promoted yet. -> the ids handed a slot, now queued: the
# caller sends their messages (its own job among them when it is first in line for a free slot).
ADD_WAITER = (
    _HELD
    + _ADMIT
    + """
local out = {}
local n = (#KEYS - 3) / 3
if redis.call('HGET', ARGV[3] .. ARGV[1], 'status') ~= 'deferred' then return out end
for i = 0, n - 1 do
  redis.call('ZADD', KEYS[4 + 3 * i], 'NX', ARGV[2], ARGV[1])
end
for i = 0, n - 1 do
  admit(KEYS[4 + 3 * i], KEYS[5 + 3 * i], KEYS[6 + 3 * i], tonumber(ARGV[6 + i]), ARGV[5], tonumber(ARGV[4]),
        ARGV[3], {KEYS[1], KEYS[2], KEYS[3]}, out)
end
return out
"""
)

# KEYS: account hash. ARGV: now_s, base_s, cap_s, reason
# A 429 that said nothing about when to come back: cool for base * 2^(n-1) s (at most cap), n = rejections in a row
# without a success in between (`bo_n`; a success clears it). Never shortens a cooldown already in place.
# -> {until_s as a string, n}
BACKOFF = """
local n = redis.call('HINCRBY', KEYS[1], 'bo_n', 1)
local wait = math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) * 2 ^ (n - 1))
local new = tonumber(ARGV[1]) + wait
local current = tonumber(redis.call('HGET', KEYS[1], 'cooldown_until') or '0') or 0
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new > current then
  redis.call('HSET', KEYS[1], 'cooldown_until', tostring(new), 'cooldown_reason', ARGV[4] .. ' (' .. wait .. ' s)')
end
return {tostring(new), n}
"""

# KEYS: account hash. ARGV: rq_rem, rq_reset, rq_lim, tk_rem, tk_reset, tk_lim, tk_est, success ('' = not given)
# The readings behind admission (see _HELD). Responses arrive out of order: a reading for a later reset replaces the
# stored one (a new window); for the same reset the smaller remaining wins; an older window's reading is dropped.
# A success ends a run of rejections (the adaptive backoff starts short again).
RECORD_LIMITS = """
local function put(p, rem, reset, lim)
  if rem == '' or reset == '' then return end
  local r, t = tonumber(rem), tonumber(reset)
  local old_t = tonumber(redis.call('HGET', KEYS[1], p .. '_reset') or '0') or 0
  if t > old_t + 0.5 then
    redis.call('HSET', KEYS[1], p .. '_rem', rem, p .. '_reset', reset)
  elseif t >= old_t - 0.5 then
    local old_r = tonumber(redis.call('HGET', KEYS[1], p .. '_rem') or rem) or r
    if r < old_r then redis.call('HSET', KEYS[1], p .. '_rem', rem) end
  end
  if lim ~= '' then redis.call('HSET', KEYS[1], p .. '_lim', lim) end
end
put('rq', ARGV[1], ARGV[2], ARGV[3])
put('tk', ARGV[4], ARGV[5], ARGV[6])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'tk_est', ARGV[7]) end
if ARGV[8] == '1' then redis.call('HDEL', KEYS[1], 'bo_n') end
return 1
"""
