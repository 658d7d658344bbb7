-- RECORD_LIMITS (AccountStore): the readings behind admission (see lib/held.lua). Responses arrive out of order: a
-- reading for a later reset replaces the stored one (a new window); for the same reset the smaller remaining wins; an
-- older window's reading is dropped. A success ends a run of rejections (the adaptive backoff starts short again).
-- KEYS: `account` (its hash).
-- ARGV: `rq_rem`, `rq_reset`, `rq_lim`, `tk_rem`, `tk_reset`, `tk_lim`, `tk_est`, `success` ('' = not given)
-- Result: 1

local account = KEYS[1]
local rq_rem = ARGV[1]
local rq_reset = ARGV[2]
local rq_lim = ARGV[3]
local tk_rem = ARGV[4]
local tk_reset = ARGV[5]
local tk_lim = ARGV[6]
local tk_est = ARGV[7]
local success = ARGV[8]

local function put(p, rem, reset, lim)
  if rem == '' or reset == '' then return end
  local r, t = tonumber(rem), tonumber(reset)
  local old_t = tonumber(redis.call('HGET', account, p .. '_reset') or '0') or 0
  if t > old_t + 0.5 then
    redis.call('HSET', account, p .. '_rem', rem, p .. '_reset', reset)
  elseif t >= old_t - 0.5 then
    local old_r = tonumber(redis.call('HGET', account, p .. '_rem') or rem) or r
    if r < old_r then redis.call('HSET', account, p .. '_rem', rem) end
  end
  if lim ~= '' then redis.call('HSET', account, p .. '_lim', lim) end
end
put('rq', rq_rem, rq_reset, rq_lim)
put('tk', tk_rem, tk_reset, tk_lim)
if tk_est ~= '' then redis.call('HSET', account, 'tk_est', tk_est) end
if success == '1' then redis.call('HDEL', account, 'bo_n') end
return 1
