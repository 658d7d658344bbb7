-- RECORD_LIMITS (AccountStore): the readings behind admission (see lib/held.lua). Responses arrive out of order: a
-- reading for a later reset replaces the stored one (a new window); for the same reset the smaller remaining wins; an
-- older window's reading is dropped. A success ends a run of rejections (the adaptive backoff starts short again).
-- KEYS: account hash.
-- ARGV: rq_rem, rq_reset, rq_lim, tk_rem, tk_reset, tk_lim, tk_est, success ('' = not given)
-- Result: 1

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
