-- gate(hash, st, n, max, now, fam, predictive, rate, jitter): may a new run of model family `fam` start on this
-- account now? -> Slot.OPEN, else FULL, DISABLED, COOLING, HELD (lib/held.lua), RESERVED (ceiling reached, or
-- predicted to be), RAMPING (the next start is due a little later); the codes are claudeq/lua/results.py's. Also
-- `reserved`, `ramp_from`, `paced`, `started` and FAMS, the model families in line order.
--
-- Window-aware admission (docs/architecture.md#window-aware-admission; `claudeq.account_state.reservations` is the
-- same rule in Python). `pu:<window>` = "utilization reset est ceiling family k" of each window that reports a
-- utilization (`pws` lists them): a new run of model family `fam` ('-' = a job for no particular family) is refused
-- while a window that applies to it (family '-' applies to every job, `opus` only to opus jobs) has not reset and
--   utilization >= ceiling                              (reserved: the ceiling is reached), or, predictive,
--   n > 0 and utilization + (n + 1) * est > ceiling     (the n runs in flight and this one would likely pass it;
--                                                        est = what one request added to that window so far, or
--                                                        before any rise was seen, utilization / k, the k readings
--                                                        of this window: every use counted as ours, an upper bound).
-- With nothing in flight a run below the ceiling always may start: a wrong estimate never holds an account for good.
-- `cd:<fam>` is a cooldown of one model family (a 429 on its own window). The ramp: once a cooldown or a
-- reservation ends (`ramp_at`, plus `ramp_j` s of jitter), at most `rate` runs start per second until as many runs
-- as the account has slots have started (`ramp_n`; `ramp_last` = the last start).

--!include lib/held.lua

local FAMS = {'-', 'opus', 'sonnet', 'haiku'}
local function reserved(st, n, now, fam, predictive)
  local names = st.pws
  if not names then return false end
  local best = false
  for w in string.gmatch(names, '%S+') do
    local v = st['pu:' .. w]
    if v then
      local u, reset, est, ceil, wf, k = string.match(v, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
      u, reset, est, ceil, k = tonumber(u), tonumber(reset), tonumber(est), tonumber(ceil), tonumber(k)
      if u and reset and est and ceil and k and reset > now and (wf == '-' or wf == fam) then
        if est <= 0 and k > 0 then est = u / k end
        local hit = u >= ceil - 1e-9
        if not hit and predictive and n > 0 and est > 0 then hit = u + (n + 1) * est > ceil + 1e-9 end
        if hit and (not best or reset > best) then best = reset end
      end
    end
  end
  return best
end
local function ramp_from(hash, st, t, jitter)
  local at = tonumber(st.ramp_at or '0') or 0
  if t > at then
    local v = string.format('%.6f', t)
    redis.call('HSET', hash, 'ramp_at', v, 'ramp_j', jitter, 'ramp_n', 0)
    st.ramp_at, st.ramp_j, st.ramp_n = v, jitter, '0'
  end
end
local function paced(st, now, rate, max)
  if rate <= 0 then return false end
  local at, j = tonumber(st.ramp_at), tonumber(st.ramp_j) or 0
  if not at or now < at or (tonumber(st.ramp_n) or 0) >= max then return false end
  if now < at + j then return at + j end
  local last = tonumber(st.ramp_last) or 0
  if last >= at and now - last < 1 / rate - 1e-6 then return last + 1 / rate end
  return false
end
local function started(hash, st, now)
  local at = tonumber(st.ramp_at or '')
  if at and now >= at then
    local v = string.format('%.6f', now)
    redis.call('HSET', hash, 'ramp_last', v)
    st.ramp_last = v
    st.ramp_n = tostring(redis.call('HINCRBY', hash, 'ramp_n', 1))
  end
end
-- A new run of family `fam` on this account now: OPEN, else FULL, DISABLED, COOLING, HELD, RESERVED (ceiling
-- reached, or predicted to be), RAMPING (the next start is due a little later).
local function gate(hash, st, n, max, now, fam, predictive, rate, jitter)
  if st.state == 'disabled' then return {{Slot.DISABLED}} end
  local until_s = tonumber(st.cooldown_until or '0') or 0
  if until_s > now then return {{Slot.COOLING}} end
  if fam ~= '-' and (tonumber(st['cd:' .. fam] or '0') or 0) > now then return {{Slot.COOLING}} end
  if n >= max then return {{Slot.FULL}} end
  local h = held(st, n, now)
  if h then ramp_from(hash, st, h, jitter) return {{Slot.HELD}} end
  local r = reserved(st, n, now, fam, predictive)
  if r then ramp_from(hash, st, r, jitter) return {{Slot.RESERVED}} end
  if paced(st, now, rate, max) then return {{Slot.RAMPING}} end
  return {{Slot.OPEN}}
end
