-- settle(keys, s): count a finished attempt's cost. keys = pairs of (spend hash, reserved hash): the tenant's, then
-- the account's (a fleet without a tenants file keeps no tenant spend: just the account's pair; its `default`
-- tenant's spend is the sum of the accounts', TenantStore.usage). `s` holds tenant/settle.lua's arguments by name:
-- job_id, cost (dollars; <= 0: none), hour_field, tenant_turn and account_turn (the turn fields, `turn:<model>`; '' =
-- nothing to learn there), sample (dollars one turn of the run cost), ttl_s, drop ('1': drop the run's reservations).
-- The cost is added to the current hour of each spend hash. What one turn of a model's runs costs is learned from it
-- where a spend cap may read it (a tenant's; an account with a cap): a sample above the estimate replaces it at once
-- (an underestimate lets a cap be overshot), one below moves it a quarter of the way down (an overestimate only
-- makes runs wait); that hash is read once and written once. Elsewhere the cost is one HINCRBYFLOAT. The spend
-- hash's expiry is set with the first cost of each hour (so it lasts ttl_s after the start of the last hour with a
-- cost, one EXPIRE an hour rather than one per run), and then the hours no cap window can read any more are removed:
-- those more than 23 hours before this one (the longest window is a calendar day), one HKEYS an hour. The terminal
-- write of a job runs it too (job/finish.lua): a job's end and its last attempt's spend in one script.

local function new_hour(key, hour, ttl)
  redis.call('EXPIRE', key, ttl)
  local oldest = tonumber(string.sub(hour, 3)) - 23
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'h:' and (tonumber(string.sub(f, 3)) or oldest) < oldest then old[#old + 1] = f end
  end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
end
local function settle(keys, s)
  local job, cost, hour = s.job_id, tonumber(s.cost), s.hour_field
  local sample, ttl, drop = tonumber(s.sample), s.ttl_s, s.drop
  for i = 1, #keys, 2 do
    local turn = s.tenant_turn
    if i == #keys - 1 then turn = s.account_turn end
    if cost > 0 and turn ~= '' then
      local f = redis.call('HMGET', keys[i], hour, turn)
      local old = tonumber(f[2] or '')
      local est = sample
      if old and old > sample then est = (3 * old + sample) / 4 end
      redis.call('HSET', keys[i], hour, tostring((tonumber(f[1] or '0') or 0) + cost), turn, tostring(est))
      if not f[1] then new_hour(keys[i], hour, ttl) end
    elseif cost > 0 then
      local total = tonumber(redis.call('HINCRBYFLOAT', keys[i], hour, s.cost))
      if total <= cost * (1 + 1e-9) then new_hour(keys[i], hour, ttl) end
    end
    if drop == '1' then redis.call('HDEL', keys[i + 1], job) end
  end
end
