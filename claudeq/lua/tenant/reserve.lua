-- RESERVE (TenantStore, claudeq/tenants/_store.py): admit a run of a tenant or on an account, within its cap on runs in
-- flight and its spend caps. A capped run may spend its budget and one more turn (the CLI checks its budget after
-- each turn): it reserves its grant plus one turn's estimated cost, and starts only when what is left in every capped
-- window, less what the runs in flight reserved, is more than one turn. With no estimate yet (no run of this model
-- finished here), a run starts only when no other run reserved anything: the first run alone teaches the estimate.
-- Reservations of runs no longer in flight are dropped.
-- KEYS: `members` (sorted set job -> slot expiry: a tenant's runs in flight, or an account's slots), `reserved_hash`
--       (its hash), `spend` (its hash).
-- ARGV: `job_id`, `take` ('1': add the job as a member, checking max; '0': the job is already a member), `max` ('' =
--       no cap), `expiry_s`, `now_s`, `hour_field`, `day_first_hour`: the day's first epoch hour, `cap_hour` ('' =
--       none), `cap_day` ('' = none), `want` ('' = the spec gave no budget), `share` ('' = none: the most runs in
--       flight at once, to split what is left between when the spec gave no budget), `turn_field` ('' = none: the
--       spend hash's field holding what one turn of this model's runs costs, 'turn:<model>', see tenant/settle.lua)
-- Result: {code, ...}, the code a Reserve (claudeq/lua/results.py): {ADMITTED, grant ('' when uncapped), turn reserved
--   beside it ('' = none)} (a job already a member keeps its slot, refreshed), {AT_MAX, ''}, {OVER_BUDGET, window
--   ('hour' | 'day')} nothing (or less than one turn) left in that window, {RESERVED, window} what is left is
--   reserved by the runs in flight (wait for one to end).


local members = KEYS[1]
local reserved_hash = KEYS[2]
local spend = KEYS[3]
local job_id = ARGV[1]
local take = ARGV[2]
local max = ARGV[3]
local expiry_s = ARGV[4]
local now_s = ARGV[5]
local hour_field = ARGV[6]
local day_first_hour = ARGV[7]
local cap_hour = ARGV[8]
local cap_day = ARGV[9]
local want = ARGV[10]
local share = ARGV[11]
local turn_field = ARGV[12]

local now = tonumber(now_s)
redis.call('ZREMRANGEBYSCORE', members, '-inf', now)
local member = redis.call('ZSCORE', members, job_id)
if take == '1' and not member and max ~= '' and redis.call('ZCARD', members) >= tonumber(max) then
  return { {{Reserve.AT_MAX}}, ''}
end
local capped = cap_hour ~= '' or cap_day ~= ''
local grant, turn = nil, 0
if capped then
  local reserved, others = 0, 0
  local all = redis.call('HGETALL', reserved_hash)
  for i = 1, #all, 2 do
    if all[i] ~= job_id then
      if redis.call('ZSCORE', members, all[i]) then
        reserved = reserved + tonumber(all[i + 1])
        others = others + 1
      else
        redis.call('HDEL', reserved_hash, all[i])
      end
    end
  end
  local known = nil
  if turn_field ~= nil and turn_field ~= '' then known = tonumber(redis.call('HGET', spend, turn_field) or '') end
  if known then turn = known end
  for _, w in ipairs({{cap_hour, 'hour'}, {cap_day, 'day'}}) do
    if w[1] ~= '' then
      local spent = 0
      if w[2] == 'hour' then
        spent = tonumber(redis.call('HGET', spend, hour_field) or '0') or 0
      else
        local hours = {}
        for h = 0, 23 do hours[#hours + 1] = 'h:' .. (tonumber(day_first_hour) + h) end
        for _, v in ipairs(redis.call('HMGET', spend, unpack(hours))) do spent = spent + (tonumber(v or '0') or 0) end
      end
      local unspent = tonumber(w[1]) - spent
      if unspent - turn <= 1e-9 then return { {{Reserve.OVER_BUDGET}}, w[2]} end
      if not known and others > 0 then return { {{Reserve.RESERVED}}, w[2]} end
      local left = unspent - reserved - turn
      if left <= 1e-9 then return { {{Reserve.RESERVED}}, w[2]} end
      if grant == nil or left < grant then grant = left end
    end
  end
  if want == '' and share ~= '' then
    -- No budget of its own: share what is left with the runs that may still start beside it.
    local others = redis.call('ZCARD', members)
    if member then others = others - 1 end
    local free = tonumber(share) - others
    if free > 1 then grant = grant / free end
  end
end
if want ~= '' and (grant == nil or tonumber(want) < grant) then grant = tonumber(want) end
if take == '1' then redis.call('ZADD', members, expiry_s, job_id) end
if capped then redis.call('HSET', reserved_hash, job_id, tostring(grant + turn)) end
if grant == nil then return { {{Reserve.ADMITTED}}, '', ''} end
if turn > 0 then return { {{Reserve.ADMITTED}}, tostring(grant), tostring(turn)} end
return { {{Reserve.ADMITTED}}, tostring(grant), ''}
