-- COOL (AccountStore): cool the account, or one model family of it, until `until_s`. Cooling never shortens a
-- cooldown already in place (a later reset seen by another worker wins). A family's cooldown (`cd:<family>`, a 429
-- on that model family's own window) holds back only that family's jobs. The ramp starts when the cooldown ends.
-- KEYS: account hash.
-- ARGV: until_s, reason, jitter_s, family ('' = the whole account)
-- Result: 1 the cooldown moved out, 0 one at least as long was in place.

--!include lib/gate.lua

local field, why = 'cooldown_until', 'cooldown_reason'
if ARGV[4] ~= '' then field, why = 'cd:' .. ARGV[4], 'cd_why:' .. ARGV[4] end
local current = tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0
local new = tonumber(ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new <= current then return 0 end
redis.call('HSET', KEYS[1], field, ARGV[1], why, ARGV[2])
ramp_from(KEYS[1], {ramp_at = redis.call('HGET', KEYS[1], 'ramp_at')}, new, ARGV[3])
return 1
