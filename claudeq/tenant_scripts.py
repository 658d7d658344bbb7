"""Lua scripts for tenants and spend caps: each runs atomically inside Redis (docs/architecture.md#tenants).

Spend is kept per calendar hour (UTC): field `h:<epoch hour>` of a spend hash holds the dollars runs spent in that
hour, added as each attempt finishes; a day's spend is the sum of its 24 hours (read in one HMGET). A run in flight
reserves the budget it was started with (the reserved hash: job id -> dollars), so runs started at the same time
never share the same dollars left.
"""

from __future__ import annotations

# KEYS: members (sorted set job -> slot expiry: a tenant's runs in flight, or an account's slots), reserved hash,
#       spend hash.
# ARGV: job_id, take ('1': add the job as a member, checking max; '0': the job is already a member), max ('' = no
#       cap), expiry_s, now_s, hour_field, the day's first epoch hour, cap_hour ('' = none), cap_day ('' = none), want
#       ('' = the spec
#       gave no budget), share ('' = none: the most runs in flight at once, to split what is left between when the
#       spec gave no budget), turn field ('' = none: the spend hash's field holding what one turn of this model's
#       runs costs, `turn:<model>`, see SETTLE)
# A capped run may spend its budget and one more turn (the CLI checks its budget after each turn): it reserves its
# grant plus one turn's estimated cost, and starts only when what is left in every capped window, less what the
# runs in flight reserved, is more than one turn. With no estimate yet (no run of this model finished here), a run
# starts only when no other run reserved anything: the first run alone teaches the estimate.
# -> {1, grant ('' when uncapped), turn reserved beside it ('' = none)} admitted (a job already a member keeps its
#    slot, refreshed), {0, ''} at max, {-4, window ('hour' | 'day')} nothing (or less than one turn) left in that
#    window, {-5, window} what is left is reserved by the runs in flight (wait for one to end). Reservations of runs
#    no longer in flight are dropped.
RESERVE = """
local now = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local member = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] == '1' and not member and ARGV[3] ~= '' and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return {0, ''}
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
      if unspent - turn <= 1e-9 then return {-4, w[2]} end
      if not known and others > 0 then return {-5, w[2]} end
      local left = unspent - reserved - turn
      if left <= 1e-9 then return {-5, w[2]} end
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
if grant == nil then return {1, '', ''} end
if turn > 0 then return {1, tostring(grant), tostring(turn)} end
return {1, tostring(grant), ''}
"""

# Lua: settle(keys, argv, from): count a finished attempt's cost. keys = pairs of (spend hash, reserved hash): the
# tenant's, then the account's (a fleet without a tenants file keeps no tenant spend: just the account's pair; its
# `default` tenant's spend is the sum of the accounts', TenantStore.usage). argv[from..from+7]: job_id, cost
# (dollars; <= 0: none), hour_field, the tenant's turn field and the account's (`turn:<model>`; '' = nothing to learn
# there), sample (dollars one turn of the run cost), ttl_s, drop ('1': drop the run's reservations).
# The cost is added to the current hour of each spend hash. What one turn of a model's runs costs is learned from it
# where a spend cap may read it (a tenant's; an account with a cap): a sample above the estimate replaces it at once
# (an underestimate lets a cap be overshot), one below moves it a quarter of the way down (an overestimate only makes
# runs wait); that hash is read once and written once. Elsewhere the cost is one HINCRBYFLOAT. The spend hash's
# expiry is set with the first cost of each hour (so it lasts ttl_s after the start of the last hour with a cost, one
# EXPIRE an hour rather than one per run), and then the hours no cap window can read any more are removed: those
# more than 23 hours before this one (the longest window is a calendar day), one HKEYS an hour. The terminal write
# of a job runs it too (FINISH in claudeq/worker/job_scripts.py): a job's end and its last attempt's spend in one
# script.
SETTLE_FN = """
local function new_hour(key, hour, ttl)
  redis.call('EXPIRE', key, ttl)
  local oldest = tonumber(string.sub(hour, 3)) - 23
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'h:' and (tonumber(string.sub(f, 3)) or oldest) < oldest then old[#old + 1] = f end
  end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
end
local function settle(keys, argv, from)
  local job, cost, hour = argv[from], tonumber(argv[from + 1]), argv[from + 2]
  local sample, ttl, drop = tonumber(argv[from + 5]), argv[from + 6], argv[from + 7]
  for i = 1, #keys, 2 do
    local turn = argv[from + 3]
    if i == #keys - 1 then turn = argv[from + 4] end
    if cost > 0 and turn ~= '' then
      local f = redis.call('HMGET', keys[i], hour, turn)
      local old = tonumber(f[2] or '')
      local est = sample
      if old and old > sample then est = (3 * old + sample) / 4 end
      redis.call('HSET', keys[i], hour, tostring((tonumber(f[1] or '0') or 0) + cost), turn, tostring(est))
      if not f[1] then new_hour(keys[i], hour, ttl) end
    elseif cost > 0 then
      local total = tonumber(redis.call('HINCRBYFLOAT', keys[i], hour, argv[from + 1]))
      if total <= cost * (1 + 1e-9) then new_hour(keys[i], hour, ttl) end
    end
    if drop == '1' then redis.call('HDEL', keys[i + 1], job) end
  end
end
"""

# KEYS: (spend hash, reserved hash) pairs, see settle. ARGV: settle's.
SETTLE = SETTLE_FN + "settle(KEYS, ARGV, 1)\nreturn 1\n"

# KEYS: tenant runs, tenant reserved, tenant waiters. ARGV: job_id, job_key_prefix, max ('' = no cap), now_s
# Ends a run of the tenant (its reservation too); when the tenant is under its cap again, pops its best waiters still
# `deferred` (stale ones are dropped), as many as it is under its cap (one without a cap; more when the cap rose, a
# share cap as other tenants went idle) -> {ids} to promote, best first, or {}.
RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[4]))
local room = 1
if ARGV[3] ~= '' then room = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1]) end
local out = {}
while #out < room do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #head == 0 then return out end
  redis.call('ZREM', KEYS[3], head[1])
  if redis.call('HGET', ARGV[2] .. head[1], 'status') == 'deferred' then out[#out + 1] = head[1] end
end
return out
"""

# KEYS: tenant runs, tenant waiters, deferred. ARGV: job_id, score, max, now_s, fallback_s (epoch)
# A deferred job waits for one of its tenant's runs to end (it keeps its place if already waiting). A run may have
# ended between the caller's failed admission and this call (its release found nobody to promote): then the job's
# deferred ready time moves to now, so the promoter picks it up at its next pass. -> 1 when it did. Otherwise its
# ready time moves out to `fallback_s` (never earlier): a run's end promotes it, the ready time is only the fallback
# (a re-send every lease TTL would put a whole backlog through the broker again and again). A job deferred but not
# yet waiting here (its worker died in between) keeps the short ready time it was deferred with.
WAIT = """
redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[4]))
local ready = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
if not ready then return 0 end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[3], 'XX', ARGV[4], ARGV[1])
  return 1
end
if ARGV[5] ~= nil and ARGV[5] ~= '' and ready < tonumber(ARGV[5]) then
  redis.call('ZADD', KEYS[3], 'XX', ARGV[5], ARGV[1])
end
return 0
"""

# KEYS: fair-share hash, job hash. ARGV: tenant, weight
# The job's virtual finish tag for weighted fair queueing (docs/architecture.md#fair-share), issued once per job and
# kept in its hash (`vtag`): max(system virtual time, the tenant's last tag) + 1 / weight. The system virtual time
# (`v`) is the largest tag admitted so far (ADVANCE). -> the tag, as a string.
TAG = """
local tag = redis.call('HGET', KEYS[2], 'vtag')
if tag then return tag end
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
local last = tonumber(redis.call('HGET', KEYS[1], 't:' .. ARGV[1]) or '0') or 0
local start = v
if last > start then start = last end
tag = tostring(start + 1 / tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 't:' .. ARGV[1], tag)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], 'vtag', tag) end
return tag
"""

# KEYS: fair-share hash. ARGV: tag. A job with this tag started: the system virtual time moves up to it.
ADVANCE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
if tonumber(ARGV[1]) > v then redis.call('HSET', KEYS[1], 'v', ARGV[1]) end
return 1
"""

# KEYS: balance hash, then per active tenant: its runs, its line, its waiters. ARGV: now_s, bound_s, repay_s (the
# calling worker's slot-seconds per slot of catch-up, kept under the field '|repay_s' for readers), then per tenant:
# name, share cap (without the balance). The catch-up of reserved fair share (docs/architecture.md#fair-share): each
# active tenant's balance, in slot-seconds, moves by (share - runs running) x the time since the last update (at most
# 1 s of it; running: its runs held less its jobs in the accounts' lines) -- up while it ran fewer than its share with
# jobs waiting (owed), down while it ran more (it owes) --
# within +-(share x bound_s). Tenants no longer active lose theirs; with fewer than two active, nobody keeps one.
# -> {name, balance, ...} (balances as strings).
BALANCE = """
local now = tonumber(ARGV[1])
local bound = tonumber(ARGV[2])
local n = (#KEYS - 1) / 3
if n < 2 then
  redis.call('DEL', KEYS[1])
  return {}
end
local out = {}
local seen = {['|repay_s'] = true}
redis.call('HSET', KEYS[1], '|repay_s', ARGV[3])
for i = 0, n - 1 do
  local name = ARGV[4 + 2 * i]
  local share = tonumber(ARGV[5 + 2 * i])
  seen[name] = true
  local d, t = 0, now
  local prev = redis.call('HGET', KEYS[1], name)
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
  local lined = redis.call('ZCARD', KEYS[3 + 3 * i])
  local running = redis.call('ZCARD', KEYS[2 + 3 * i]) - lined
  if running < 0 then running = 0 end
  local rate = share - running
  local waiting = lined > 0 or redis.call('EXISTS', KEYS[4 + 3 * i]) == 1
  if rate > 0 and not waiting then rate = 0 end
  d = d + rate * dt
  local most = share * bound
  if d > most then d = most end
  if d < -most then d = -most end
  redis.call('HSET', KEYS[1], name, tostring(d) .. '|' .. tostring(now))
  out[#out + 1] = name
  out[#out + 1] = tostring(d)
end
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  if not seen[name] then redis.call('HDEL', KEYS[1], name) end
end
return out
"""
