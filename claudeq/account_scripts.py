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

# KEYS: slots, account hash. ARGV: job_id, max_concurrency, expiry_s, now_s
# -> 1 acquired (or already held: ZADD refreshes, so a redelivery never takes two slots), 0 full,
#    -1 disabled, -2 cooling, -3 held (see _HELD). The account's state is checked here too, so a cooldown written by
#    another worker a moment ago is honoured even when the caller's snapshot was older.
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
if n >= tonumber(ARGV[2]) then return 0 end
if held(KEYS[2], n, tonumber(ARGV[4])) then return -3 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'n:acquired', 1)
return 1
"""
)

# KEYS: slots, waiters, account hash. ARGV: job_id, job_key_prefix, now_s
# Frees the job's slot, then pops the oldest waiter that is still `deferred` (stale ones are dropped) so one
# released slot promotes one job. A cooling or disabled account promotes nobody: its waiters would only re-defer.
RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[3], 'state') == 'disabled' then return {} end
local until_s = tonumber(redis.call('HGET', KEYS[3], 'cooldown_until') or '0') or 0
if until_s > tonumber(ARGV[3]) then return {} end
while true do
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #head == 0 then return {} end
  redis.call('ZREM', KEYS[2], head[1])
  if redis.call('HGET', ARGV[2] .. head[1], 'status') == 'deferred' then return {head[1]} end
end
"""

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

# KEYS: deferred, then per account: waiters, slots, account hash. ARGV: job_id, now_s, then per account: max
# Registers the waiter on each account. A slot may have been released between the caller's failed acquire and
# this call (that release found no waiter to promote): then the job's deferred ready time moves to now, so the
# promoter picks it up at its next pass instead of at the slot's expiry. -> 1 when it did.
ADD_WAITER = (
    _HELD
    + """
local free = false
local n = (#KEYS - 1) / 3
for i = 0, n - 1 do
  local waiters, slots, hash = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  redis.call('ZADD', waiters, 'NX', ARGV[2], ARGV[1])
  if not free then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', ARGV[2])
    local until_s = tonumber(redis.call('HGET', hash, 'cooldown_until') or '0') or 0
    if redis.call('HGET', hash, 'state') ~= 'disabled' and until_s <= tonumber(ARGV[2])
       and redis.call('ZCARD', slots) < tonumber(ARGV[3 + i])
       and not held(hash, redis.call('ZCARD', slots), tonumber(ARGV[2])) then
      free = true
    end
  end
end
if free and redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
  return 1
end
return 0
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
