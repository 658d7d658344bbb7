"""Lua scripts for the per-account semaphore and account state: each runs atomically inside Redis.

Times are epoch seconds passed in by the caller (every worker and the CLI use their own clock, as the job store
does). The account hash fields are described in claudeq/account_state.py.
"""

from __future__ import annotations

# KEYS: slots, account hash. ARGV: job_id, max_concurrency, expiry_s, now_s
# -> 1 acquired (or already held: ZADD refreshes, so a redelivery never takes two slots), 0 full,
#    -1 disabled, -2 cooling. The account's state is checked here too, so a cooldown written by another worker a
#    moment ago is honoured even when the caller's snapshot was older.
ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
if redis.call('HGET', KEYS[2], 'state') == 'disabled' then return -1 end
local until_s = tonumber(redis.call('HGET', KEYS[2], 'cooldown_until') or '0') or 0
if until_s > tonumber(ARGV[4]) then return -2 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'n:acquired', 1)
return 1
"""

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
ADD_WAITER = """
local free = false
local n = (#KEYS - 1) / 3
for i = 0, n - 1 do
  local waiters, slots, hash = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  redis.call('ZADD', waiters, 'NX', ARGV[2], ARGV[1])
  if not free then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', ARGV[2])
    local until_s = tonumber(redis.call('HGET', hash, 'cooldown_until') or '0') or 0
    if redis.call('HGET', hash, 'state') ~= 'disabled' and until_s <= tonumber(ARGV[2])
       and redis.call('ZCARD', slots) < tonumber(ARGV[3 + i]) then
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
