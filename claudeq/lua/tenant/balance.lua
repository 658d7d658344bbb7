-- BALANCE (TenantStore): the catch-up of reserved fair share (docs/architecture.md#fair-share): each active tenant's
-- balance, in slot-seconds, moves by (share - runs running) x the time since the last update (at most 1 s of it;
-- running: its runs held less its jobs in the accounts' lines) -- up while it ran fewer than its share with jobs
-- waiting (owed), down while it ran more (it owes) -- within +-(share x bound_s). Tenants no longer active lose
-- theirs; with fewer than two active, nobody keeps one.
-- KEYS: `balances` (the hash), then `tenant_keys`: per active tenant, its runs, its line, its waiters.
-- ARGV: `now_s`, `bound_s`, `repay_s` (the calling worker's slot-seconds per slot of catch-up, kept under the field
--       '|repay_s' for readers), then `tenants`: per tenant, its name, its share cap (without the balance)
-- Result: {name, balance, ...} (balances as strings).

--!include lib/args.lua

local balances = KEYS[1]
local tenant_keys = args_list(KEYS, 2)
local now_s = tonumber(ARGV[1])
local bound_s = tonumber(ARGV[2])
local repay_s = ARGV[3]
local tenants = args_list(ARGV, 4)

local now, bound = now_s, bound_s
local n = #tenant_keys / 3
if n < 2 then
  redis.call('DEL', balances)
  return {}
end
local out = {}
local seen = {['|repay_s'] = true}
redis.call('HSET', balances, '|repay_s', repay_s)
for i = 0, n - 1 do
  local name = tenants[1 + 2 * i]
  local share = tonumber(tenants[2 + 2 * i])
  seen[name] = true
  local d, t = 0, now
  local prev = redis.call('HGET', balances, name)
  if prev then
    local sep = string.find(prev, '|', 1, true)
    if sep then
      d = tonumber(string.sub(prev, 1, sep - 1)) or 0
      t = tonumber(string.sub(prev, sep + 1)) or now
    end
  end
  local dt = now - t
  if dt < 0 then dt = 0 end
  if dt > 1 then dt = 1 end
  local lined = redis.call('ZCARD', tenant_keys[2 + 3 * i])
  local running = redis.call('ZCARD', tenant_keys[1 + 3 * i]) - lined
  if running < 0 then running = 0 end
  local rate = share - running
  local waiting = lined > 0 or redis.call('EXISTS', tenant_keys[3 + 3 * i]) == 1
  if rate > 0 and not waiting then rate = 0 end
  d = d + rate * dt
  local most = share * bound
  if d > most then d = most end
  if d < -most then d = -most end
  redis.call('HSET', balances, name, tostring(d) .. '|' .. tostring(now))
  out[#out + 1] = name
  out[#out + 1] = tostring(d)
end
for _, name in ipairs(redis.call('HKEYS', balances)) do
  if not seen[name] then redis.call('HDEL', balances, name) end
end
return out
