-- BACKOFF (AccountStore): a 429 that said nothing about when to come back: cool for base * 2^(n-1) s (at most cap),
-- n = rejections in a row without a success in between (`bo_n`; a success clears it, account/record_limits.lua).
-- Never shortens a cooldown already in place.
-- KEYS: account hash.
-- ARGV: now_s, base_s, cap_s, reason, jitter_s
-- Result: {until_s as a string, n}

--!include lib/gate.lua

local n = redis.call('HINCRBY', KEYS[1], 'bo_n', 1)
local wait = math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) * 2 ^ (n - 1))
local new = tonumber(ARGV[1]) + wait
local current = tonumber(redis.call('HGET', KEYS[1], 'cooldown_until') or '0') or 0
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new > current then
  redis.call('HSET', KEYS[1], 'cooldown_until', tostring(new), 'cooldown_reason', ARGV[4] .. ' (' .. wait .. ' s)')
  ramp_from(KEYS[1], {ramp_at = redis.call('HGET', KEYS[1], 'ramp_at')}, new, ARGV[5])
end
return {tostring(new), n}
