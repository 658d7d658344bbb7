-- COOL (AccountStore): cool the account, or one model family of it, until until_s. Cooling never shortens a
-- cooldown already in place (a later reset seen by another worker wins). A family's cooldown (`cd:<family>`, a 429
-- on that model family's own window) holds back only that family's jobs. The ramp starts when the cooldown ends.
-- KEYS: `account` (its hash).
-- ARGV: `until_s`, `reason`, `jitter_s`, `family` ('' = the whole account)
-- Result: 1 the cooldown moved out, 0 one at least as long was in place.

--!include lib/gate.lua

local account = KEYS[1]
local until_s = ARGV[1]
local reason = ARGV[2]
local jitter_s = ARGV[3]
local family = ARGV[4]

local field, why = 'cooldown_until', 'cooldown_reason'
if family ~= '' then field, why = 'cd:' .. family, 'cd_why:' .. family end
local current = tonumber(redis.call('HGET', account, field) or '0') or 0
local new = tonumber(until_s)
redis.call('HINCRBY', account, 'n:cooled', 1)
if new <= current then return 0 end
redis.call('HSET', account, field, until_s, why, reason)
ramp_from(account, {ramp_at = redis.call('HGET', account, 'ramp_at')}, new, jitter_s)
return 1
