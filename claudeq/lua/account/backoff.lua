-- BACKOFF (AccountStore): a 429 that said nothing about when to come back: cool for base * 2^(n-1) s (at most cap),
-- n = rejections in a row without a success in between (`bo_n`; a success clears it, account/record_limits.lua).
-- Never shortens a cooldown already in place.
-- KEYS: `account` (its hash).
-- ARGV: `now_s`, `base_s`, `cap_s`, `reason`, `jitter_s`
-- Result: {until_s as a string, n}

--!include lib/gate.lua

local account = KEYS[1]
local now_s = tonumber(ARGV[1])
local base_s = tonumber(ARGV[2])
local cap_s = tonumber(ARGV[3])
local reason = ARGV[4]
local jitter_s = ARGV[5]

local n = redis.call('HINCRBY', account, 'bo_n', 1)
local wait = math.min(cap_s, base_s * 2 ^ (n - 1))
local new = now_s + wait
local current = tonumber(redis.call('HGET', account, 'cooldown_until') or '0') or 0
redis.call('HINCRBY', account, 'n:cooled', 1)
if new > current then
  redis.call('HSET', account, 'cooldown_until', tostring(new), 'cooldown_reason', reason .. ' (' .. wait .. ' s)')
  ramp_from(account, {ramp_at = redis.call('HGET', account, 'ramp_at')}, new, jitter_s)
end
return {tostring(new), n}
