-- RECORD_UTIL (AccountStore): the utilization readings behind window-aware admission (see lib/gate.lua). Responses
-- arrive out of order: a reading for a later reset replaces the stored one (a new window; what one request adds,
-- `est`, carries over; k = 1 reading); for the same reset the larger utilization wins, k counts the readings, and a
-- rise over the stored utilization is a sample of what one request adds (est: the mean of the last sample and the
-- previous est); an older window's reading is dropped. A window at or over its ceiling starts the ramp at its reset.
-- KEYS: `account` (its hash).
-- ARGV: `jitter_s`, then `windows`: per window, its name, utilization, reset_s, ceiling, family ('-' = every job)
-- Result: 1

--!include lib/gate.lua
--!include lib/args.lua

local account = KEYS[1]
local jitter_s = ARGV[1]
local windows = args_list(ARGV, 2)

local names = redis.call('HGET', account, 'pws') or ''
local st = {ramp_at = redis.call('HGET', account, 'ramp_at')}
for i = 1, #windows, 5 do
  local w, u, reset = windows[i], tonumber(windows[i + 1]), tonumber(windows[i + 2])
  local ceil, fam = windows[i + 3], windows[i + 4]
  local old = redis.call('HGET', account, 'pu:' .. w)
  local ou, oreset, oest, ok = nil, 0, 0, 0
  if old then
    local a, b, c, d = string.match(old, '^(%S+) (%S+) (%S+) %S+ %S+ (%S+)')
    ou, oreset, oest, ok = tonumber(a), tonumber(b) or 0, tonumber(c) or 0, tonumber(d) or 0
  end
  local value = nil
  if not old or reset > oreset + 0.5 then
    value = {u, reset, oest, 1}
  elseif reset >= oreset - 0.5 then
    local est = oest
    if ou and u > ou + 1e-9 then
      local sample = u - ou
      if est > 0 then est = (est + sample) / 2 else est = sample end
    end
    value = {math.max(u, ou or 0), oreset, est, ok + 1}
  end
  if value then
    redis.call('HSET', account, 'pu:' .. w,
      string.format('%.6g %.3f %.6g %s %s %d', value[1], value[2], value[3], ceil, fam, value[4]))
    if not string.find(' ' .. names .. ' ', ' ' .. w .. ' ', 1, true) then
      names = names == '' and w or (names .. ' ' .. w)
      redis.call('HSET', account, 'pws', names)
    end
    if value[1] >= tonumber(ceil) - 1e-9 then ramp_from(account, st, value[2], jitter_s) end
  end
end
return 1
