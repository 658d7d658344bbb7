-- RESERVE (TenantStore, claudeq/tenant_state.py): admit a run of a tenant or on an account, within its cap on runs in
-- flight and its spend caps. A capped run may spend its budget and one more turn (the CLI checks its budget after
-- each turn): it reserves its grant plus one turn's estimated cost, and starts only when what is left in every capped
-- window, less what the runs in flight reserved, is more than one turn. With no estimate yet (no run of this model
-- finished here), a run starts only when no other run reserved anything: the first run alone teaches the estimate.
-- Reservations of runs no longer in flight are dropped.
-- KEYS: members (sorted set job -> slot expiry: a tenant's runs in flight, or an account's slots), reserved hash,
--       spend hash.
-- ARGV: job_id, take ('1': add the job as a member, checking max; '0': the job is already a member), max ('' = no
--       cap), expiry_s, now_s, hour_field, the day's first epoch hour, cap_hour ('' = none), cap_day ('' = none), want
--       ('' = the spec gave no budget), share ('' = none: the most runs in flight at once, to split what is left
--       between when the spec gave no budget), turn field ('' = none: the spend hash's field holding what one turn of
--       this model's runs costs, `turn:<model>`, see tenant/settle.lua)
-- Result: {code, ...}, the code a Reserve (claudeq/lua/results.py): {ADMITTED, grant ('' when uncapped), turn reserved
--   beside it ('' = none)} (a job already a member keeps its slot, refreshed), {AT_MAX, ''}, {OVER_BUDGET, window
--   ('hour' | 'day')} nothing (or less than one turn) left in that window, {RESERVED, window} what is left is
--   reserved by the runs in flight (wait for one to end).

local now = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local member = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] == '1' and not member and ARGV[3] ~= '' and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return { {{Reserve.AT_MAX}}, ''}
end
local capped = ARGV[8] ~= '' or ARGV[9] ~= ''
local grant, turn = nil, 0
if capped then
  local reserved, others = 0, 0
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] then
      if redis.call('ZSCORE', KEYS[1], all[i]) then
        reserved = reserved + tonumber(all[i + 1])
        others = others + 1
      else
        redis.call('HDEL', KEYS[2], all[i])
      end
    end
  end
  local known = nil
  if ARGV[12] ~= nil and ARGV[12] ~= '' then known = tonumber(redis.call('HGET', KEYS[3], ARGV[12]) or '') end
  if known then turn = known end
  for _, w in ipairs({{ARGV[8], 'hour'}, {ARGV[9], 'day'}}) do
    if w[1] ~= '' then
      local spent = 0
      if w[2] == 'hour' then
        spent = tonumber(redis.call('HGET', KEYS[3], ARGV[6]) or '0') or 0
      else
        local hours = {}
        for h = 0, 23 do hours[#hours + 1] = 'h:' .. (tonumber(ARGV[7]) + h) end
        for _, v in ipairs(redis.call('HMGET', KEYS[3], unpack(hours))) do spent = spent + (tonumber(v or '0') or 0) end
      end
      local unspent = tonumber(w[1]) - spent
      if unspent - turn <= 1e-9 then return { {{Reserve.OVER_BUDGET}}, w[2]} end
      if not known and others > 0 then return { {{Reserve.RESERVED}}, w[2]} end
      local left = unspent - reserved - turn
      if left <= 1e-9 then return { {{Reserve.RESERVED}}, w[2]} end
      if grant == nil or left < grant then grant = left end
    end
  end
  if ARGV[10] == '' and ARGV[11] ~= '' then
    -- No budget of its own: share what is left with the runs that may still start beside it.
    local others = redis.call('ZCARD', KEYS[1])
    if member then others = others - 1 end
    local free = tonumber(ARGV[11]) - others
    if free > 1 then grant = grant / free end
  end
end
if ARGV[10] ~= '' and (grant == nil or tonumber(ARGV[10]) < grant) then grant = tonumber(ARGV[10]) end
if ARGV[2] == '1' then redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1]) end
if capped then redis.call('HSET', KEYS[2], ARGV[1], tostring(grant + turn)) end
if grant == nil then return { {{Reserve.ADMITTED}}, '', ''} end
if turn > 0 then return { {{Reserve.ADMITTED}}, tostring(grant), tostring(turn)} end
return { {{Reserve.ADMITTED}}, tostring(grant), ''}
