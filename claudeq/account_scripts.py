"""Lua scripts for the per-account semaphore and account state: each runs atomically inside Redis.

Times are epoch seconds passed in by the caller (every worker and the CLI use their own clock, as the job store
does). The account hash fields are described in claudeq/account_state.py.
"""

from __future__ import annotations

# The account hash's admission fields, read once per script run (one HMGET; a second one reads the `pu:<window>`
# fields of the windows `pws` lists): `st` is that copy, and every write below to one of these fields updates it, so
# a script that gates several times (a release handing out slots, an acquire looking at the waiting lines) reads
# the hash once instead of field by field.
_STATE = """
local FIELDS = {'state', 'cooldown_until', 'cd:opus', 'cd:sonnet', 'cd:haiku', 'rq_rem', 'rq_reset', 'rq_lim',
                'tk_rem', 'tk_reset', 'tk_lim', 'tk_est', 'pws', 'ramp_at', 'ramp_j', 'ramp_last', 'ramp_n', 'wq'}
local unpack_ = table.unpack or unpack
local function account_state(hash)
  local v = redis.call('HMGET', hash, unpack_(FIELDS))
  local st = {}
  for i = 1, #FIELDS do st[FIELDS[i]] = v[i] end
  if st.pws then
    local fields = {}
    for w in string.gmatch(st.pws, '%S+') do fields[#fields + 1] = 'pu:' .. w end
    if #fields > 0 then
      local u = redis.call('HMGET', hash, unpack_(fields))
      for i = 1, #fields do st[fields[i]] = u[i] end
    end
  end
  return st
end
"""

# Admission before exhaustion (the `held` rule; `claudeq.account_state.held` is the same rule in Python): with the
# last `remaining` the API reported for requests (`rq_rem`, window resetting at `rq_reset`, limit `rq_lim`) and
# tokens (`tk_rem`, `tk_reset`, `tk_lim`, about `tk_est` tokens per request), a new run is held back while the runs
# in flight (n) may use up what is left: left - n <= 0 requests, or left - n * tk_est <= 0 tokens. Once the window
# has reset, what is left is its limit. -> the time the hold lifts at the latest, or false.
_HELD = """
local function left(rem, reset, lim, now)
  if rem and reset and reset > now then return rem, reset end
  return lim, now + 1
end
local function held(st, n, now)
  local rq, rq_at = left(tonumber(st.rq_rem), tonumber(st.rq_reset), tonumber(st.rq_lim), now)
  if rq and rq - n <= 0 then return rq_at end
  local tk, tk_at = left(tonumber(st.tk_rem), tonumber(st.tk_reset), tonumber(st.tk_lim), now)
  if tk and tk - n * (tonumber(st.tk_est) or 0) <= 0 then return tk_at end
  return false
end
"""

# Window-aware admission (docs/architecture.md#window-aware-admission; `claudeq.account_state.reservations` is the
# same rule in Python). `pu:<window>` = "utilization reset est ceiling family" of each window that reports a
# utilization (`pws` lists them): a new run of model family `fam` ('-' = a job for no particular family) is refused
# while a window that applies to it (family '-' applies to every job, `opus` only to opus jobs) has not reset and
#   utilization >= ceiling                              (reserved: the ceiling is reached), or, predictive,
#   n > 0 and utilization + (n + 1) * est > ceiling     (the n runs in flight and this one would likely pass it;
#                                                        est = what one request added to that window so far, or
#                                                        before any rise was seen, utilization / k, the k readings
#                                                        of this window: every use counted as ours, an upper bound).
# With nothing in flight a run below the ceiling always may start: a wrong estimate never holds an account for good.
# `cd:<fam>` is a cooldown of one model family (a 429 on its own window). The ramp: once a cooldown or a
# reservation ends (`ramp_at`, plus `ramp_j` s of jitter), at most `rate` runs start per second until as many runs
# as the account has slots have started (`ramp_n`; `ramp_last` = the last start).
_GATE = """
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
-- A new run of family `fam` on this account now: 1 open, else 0 full, -1 disabled, -2 cooling, -3 held,
-- -5 reserved (ceiling reached, or predicted to be), -6 ramping (the next start is due a little later).
local function gate(hash, st, n, max, now, fam, predictive, rate, jitter)
  if st.state == 'disabled' then return -1 end
  local until_s = tonumber(st.cooldown_until or '0') or 0
  if until_s > now then return -2 end
  if fam ~= '-' and (tonumber(st['cd:' .. fam] or '0') or 0) > now then return -2 end
  if n >= max then return 0 end
  local h = held(st, n, now)
  if h then ramp_from(hash, st, h, jitter) return -3 end
  local r = reserved(st, n, now, fam, predictive)
  if r then ramp_from(hash, st, r, jitter) return -5 end
  if paced(st, now, rate, max) then return -6 end
  return 1
end
"""

# The waiting line (docs/architecture.md#the-waiting-line): the jobs waiting for a slot on an account are sorted sets
# scored by rank (lower goes first: priority, then age; see worker/waiting_line.py), one line per model family
# (`acct:{name}:waiters` for jobs of no particular family, `…:waiters:opus`, `…:sonnet`, `…:haiku`), so a family
# held back on the account never blocks the others. A slot that frees goes to the best-ranked waiter still
# `deferred` among the lines whose family the account admits now (`gate`): `admit` puts that job in the semaphore
# itself (a handoff, with the slot's usual expiry) and promotes it in the same step (`deferred` -> `queued`, as
# PROMOTE in worker/job_scripts.py does), so no job that arrives meanwhile can take that slot and no other account's
# line hands the same job a second slot; the caller sends the named jobs' messages. The job's hash names the slots
# key it was handed (`slot`): its next acquire looks for the slot there. Waiters no longer deferred
# (served by another account, cancelled, finished) are dropped on the way. `lines` = the four line keys in FAMS
# order; `jk` = {deferred, queued} keys; `o` = {predictive, rate, jitter}.
#
# Priority within a tenant (with a tenants file; docs/architecture.md#fair-share): the lines are scored by virtual
# finish tag, so the best-ranked waiter's tag says whose turn the slot is. The turn goes to that tenant's best job
# still deferred in one of this account's open lines by priority, then creation time: the waiter's hash names its
# tenant's line (`tl`: job -> priority x 1e10 + creation time, see ADD_WAITER). A better job found there takes the
# turn and swaps tags with the waiter (in every line the waiter sits in, `wl`, and in the job hashes' `vtag`), so the
# tenant's tags, its turns, are unchanged: its share is the same, and which of its jobs a turn serves is decided
# by that order alone (jobs of one priority go in submit order whichever tags they hold).
_ADMIT = """
local function within(tl, w, ws, wline, lines, open, job_prefix)
  local wp = redis.call('ZSCORE', tl, w)
  if not wp then return w, wline end
  local cands = redis.call('ZRANGEBYSCORE', tl, '-inf', '(' .. wp, 'LIMIT', 0, 32)
  for _, c in ipairs(cands) do
    if redis.call('HGET', job_prefix .. c, 'status') ~= 'deferred' then
      redis.call('ZREM', tl, c)
    else
      for i = 1, 4 do
        local cs = open[i] and redis.call('ZSCORE', lines[i], c)
        if cs then
          local wjob = job_prefix .. w
          for key in string.gmatch(redis.call('HGET', wjob, 'wl') or '', '%S+') do
            redis.call('ZADD', key, 'XX', cs, w)
          end
          redis.call('ZADD', wline, 'XX', cs, w)
          redis.call('HSET', wjob, 'vtag', cs)
          redis.call('HSET', job_prefix .. c, 'vtag', ws)
          return c, lines[i]
        end
      end
    end
  end
  return w, wline
end
local function admit(lines, slots, hash, max, expiry, now, job_prefix, jk, o, out)
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local st = account_state(hash)
  while true do
    local n = redis.call('ZCARD', slots)
    local waiting = redis.call('EXISTS', lines[1], lines[2], lines[3], lines[4]) > 0
    local best, best_score, best_raw, best_line = nil, nil, nil, nil
    local open = {}
    for i = 1, 4 do
      if gate(hash, st, n, max, now, FAMS[i], o[1], o[2], o[3]) == 1 then
        open[i] = true
        while waiting do
          local head = redis.call('ZRANGE', lines[i], 0, 0, 'WITHSCORES')
          if #head == 0 then break end
          if redis.call('HGET', job_prefix .. head[1], 'status') == 'deferred' then
            local score = tonumber(head[2])
            if best == nil or score < best_score then
              best, best_score, best_raw, best_line = head[1], score, head[2], lines[i]
            end
            break
          end
          redis.call('ZREM', lines[i], head[1])
        end
      end
    end
    if best == nil then return end
    local tl = redis.call('HGET', job_prefix .. best, 'tl')
    if tl then best, best_line = within(tl, best, best_raw, best_line, lines, open, job_prefix) end
    redis.call('ZREM', best_line, best)
    local job = job_prefix .. best
    if tl then
      redis.call('ZREM', tl, best)
      redis.call('HDEL', job, 'tl', 'wl')
    end
    redis.call('ZADD', slots, expiry, best)
    redis.call('HINCRBY', hash, 'n:acquired', 1)
    started(hash, st, now)
    redis.call('ZREM', jk[1], best)
    redis.call('HSET', job, 'status', 'queued', 'slot', slots)
    redis.call('HDEL', job, 'ready_at')
    redis.call('ZADD', jk[2], now, best)
    out[#out + 1] = best
  end
end
"""

# Frees `job`'s slot, then hands the free slots to the best waiters still `deferred` (`admit`; their ids are added
# to `out`). With nobody in line, that is the ZREM and one look at the lines (expired slots are left to the
# promoter's pass).
_RELEASE_FN = """
local function release(job, slots, hash, lines, max, expiry, now, job_prefix, jk, o, out)
  redis.call('ZREM', slots, job)
  if redis.call('EXISTS', lines[1], lines[2], lines[3], lines[4]) == 0 then return end
  admit(lines, slots, hash, max, expiry, now, job_prefix, jk, o, out)
end
"""

ADMISSION = _STATE + _HELD + _GATE + _ADMIT + _RELEASE_FN

# KEYS: slots, account hash, the four lines. ARGV: job_id, max_concurrency, expiry_s, now_s, rank ('' = none),
# job_key_prefix, family index (1..4 in FAMS), predictive ('1'/''), ramp rate, jitter_s, may hold ('1'/'': whether
# the job may hold a slot here already; '' skips that check and counts the live slots without dropping the expired
# ones, which the promoter's pass (`admit`) drops: two commands fewer on every first acquire)
# -> 1 acquired (or already held: ZADD refreshes, so a redelivery never takes two slots; a slot handed over by
#    `admit` is taken this way, unless the job's family was closed meanwhile: then it is given back, -5), 0 full,
#    -1 disabled, -2 cooling (the account, or the job's model family), -3 held (see _HELD), -4 the free slots
#    belong to waiters ranked before this job (it waits in line), -5 reserved, -6 ramping (see _GATE). The
#    account's state is checked here too, so a cooldown written by another worker a moment ago is honoured even
#    when the caller's snapshot was older.
ACQUIRE_FN = """
local function acquire(KEYS, ARGV)
  local now, max = tonumber(ARGV[4]), tonumber(ARGV[2])
  local fam, predictive, rate = FAMS[tonumber(ARGV[7])], ARGV[8] == '1', tonumber(ARGV[9])
  local st, n
  if ARGV[11] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
    st = account_state(KEYS[2])
    if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
      local others = redis.call('ZCARD', KEYS[1]) - 1
      local closed = fam ~= '-' and (tonumber(st['cd:' .. fam] or '0') or 0) > now
      if closed or reserved(st, others, now, fam, predictive) then
        redis.call('ZREM', KEYS[1], ARGV[1])
        return -5
      end
      redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
      return 1
    end
    n = redis.call('ZCARD', KEYS[1])
  else
    st = account_state(KEYS[2])
    n = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[4], '+inf')
  end
  local g = gate(KEYS[2], st, n, max, now, fam, predictive, rate, ARGV[10])
  if g ~= 1 then return g end
  -- With no rank, or no line holding anyone, the job is in no line. `wq` is set whenever a job joins a line
  -- (ADD_WAITER): without it the lines are empty and need no look; with it, the look clears it once they are.
  local waiting = ARGV[5] == ''
  if not waiting and st.wq then
    waiting = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], KEYS[6]) > 0
    if not waiting then redis.call('HDEL', KEYS[2], 'wq') end
  end
  if ARGV[5] ~= '' then
    -- Waiters still deferred, ranked strictly before this job, in a line the account admits now, have first call on
    -- the free slots. During a ramp only one start is due (`paced` said so): however many slots are free, a waiter
    -- ranked before this job has first call on it.
    local free, ahead = max - n, 0
    local ramp_at = tonumber(st.ramp_at)
    if rate > 0 and ramp_at and now >= ramp_at and (tonumber(st.ramp_n) or 0) < max then free = 1 end
    for i = 1, 4 do
      if ahead >= free then break end
      if i == 1 or gate(KEYS[2], st, n, max, now, FAMS[i], predictive, rate, ARGV[10]) == 1 then
        local offset = 0
        while waiting and ahead < free do
          local e = redis.call('ZRANGEBYSCORE', KEYS[2 + i], '-inf', '(' .. ARGV[5], 'LIMIT', offset, 1)
          if #e == 0 then break end
          if e[1] == ARGV[1] then
            offset = offset + 1
          elseif redis.call('HGET', ARGV[6] .. e[1], 'status') == 'deferred' then
            ahead = ahead + 1
            offset = offset + 1
          else
            redis.call('ZREM', KEYS[2 + i], e[1])
          end
        end
      end
    end
    if ahead >= free then return -4 end
  end
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  if waiting then redis.call('ZREM', KEYS[2 + tonumber(ARGV[7])], ARGV[1]) end
  redis.call('HINCRBY', KEYS[2], 'n:acquired', 1)
  started(KEYS[2], st, now)
  return 1
end
"""

# The attempt's start in the same script on a worker: START in claudeq/worker/job_scripts.py.
ACQUIRE = ADMISSION + ACQUIRE_FN + "return acquire(KEYS, ARGV)\n"

# KEYS: slots, account hash, the four lines, deferred, queued. ARGV: job_id, job_key_prefix, now_s,
# max_concurrency, expiry_s, predictive, ramp rate, jitter_s
# Frees the job's slot, then hands the free slots to the best waiters still `deferred` (`admit`) -> their ids, now
# queued: the caller sends their messages. A cooling or disabled account admits nobody. The terminal write of a
# job does the same in its own script (FINISH in claudeq/worker/job_scripts.py).
RELEASE = (
    ADMISSION
    + """
local out = {}
release(ARGV[1], KEYS[1], KEYS[2], {KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[3]),
        ARGV[2], {KEYS[7], KEYS[8]}, {ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8]}, out)
return out
"""
)

# KEYS: slots, account hash, the four lines, deferred, queued. ARGV: job_key_prefix, now_s,
# max_concurrency, expiry_s, predictive, ramp rate, jitter_s
# The promoter's pass over an account: hand its free slots to its best waiters (after a cooldown ends, a hold
# lifts, a window resets, or a slot expired) -> their ids, now queued: the caller sends their messages.
ADMIT = (
    ADMISSION
    + """
local out = {}
admit({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, KEYS[1], KEYS[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[2]), ARGV[1],
      {KEYS[7], KEYS[8]}, {ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]}, out)
return out
"""
)

# KEYS: account hash. ARGV: until_s, reason, jitter_s, family ('' = the whole account)
# Cooling never shortens a cooldown already in place (a later reset seen by another worker wins). A family's cooldown
# (`cd:<family>`, a 429 on that model family's own window) holds back only that family's jobs. The ramp starts when
# the cooldown ends.
COOL = (
    _STATE
    + _HELD
    + _GATE
    + """
local field, why = 'cooldown_until', 'cooldown_reason'
if ARGV[4] ~= '' then field, why = 'cd:' .. ARGV[4], 'cd_why:' .. ARGV[4] end
local current = tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0
local new = tonumber(ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new <= current then return 0 end
redis.call('HSET', KEYS[1], field, ARGV[1], why, ARGV[2])
ramp_from(KEYS[1], {ramp_at = redis.call('HGET', KEYS[1], 'ramp_at')}, new, ARGV[3])
return 1
"""
)

# KEYS: account hash. ARGV: state, warn_window
# A rate-limit signal sets ok/warning but never overwrites `disabled` (only an operator enables).
SET_STATE = """
if redis.call('HGET', KEYS[1], 'state') == 'disabled' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'warn_window', ARGV[2])
return 1
"""

# KEYS: deferred, queued, then per account: slots, account hash, the four lines. ARGV: job_id, rank,
# job_key_prefix, now_s, expiry_s, family index (1..4), predictive, jitter_s, fallback_s (epoch), tenant line
# ('' = none), the job's score in it, then per account: max_concurrency, ramp rate
# Puts a deferred job in its family's waiting line of each account at its rank (a job already in line keeps its
# place; with a tenant line, the job joins it too and its hash records that line, `tl`, and the account lines it
# sits in, `wl`: see `within`) and moves its ready time in the deferred set out to `fallback_s` (never earlier):
# in line, a freed slot is handed to it, and the ready time is only the fallback should that never happen. A job
# deferred but not yet in line (its worker died in between) keeps the short ready time it was deferred with. Then
# lets each account admit: a slot may have been released between the caller's failed acquire and this call, or the
# caller yielded to better-ranked waiters that nobody has promoted yet. -> the ids handed a slot, now queued: the
# caller sends their messages (its own job among them when it is first in line for a free slot).
ADD_WAITER = (
    ADMISSION
    + """
local out = {}
local n = (#KEYS - 2) / 6
if redis.call('HGET', ARGV[3] .. ARGV[1], 'status') ~= 'deferred' then return out end
local fi = tonumber(ARGV[6])
for i = 0, n - 1 do
  redis.call('ZADD', KEYS[2 + 6 * i + 2 + fi], 'NX', ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[2 + 6 * i + 2], 'wq', '1')  -- someone may be in line: ACQUIRE looks (see there)
end
if ARGV[10] ~= '' then
  local job = ARGV[3] .. ARGV[1]
  redis.call('ZADD', ARGV[10], 'NX', ARGV[11], ARGV[1])
  local wl = redis.call('HGET', job, 'wl') or ''
  for i = 0, n - 1 do
    local key = KEYS[2 + 6 * i + 2 + fi]
    if not string.find(' ' .. wl .. ' ', ' ' .. key .. ' ', 1, true) then
      wl = wl == '' and key or (wl .. ' ' .. key)
    end
  end
  redis.call('HSET', job, 'tl', ARGV[10], 'wl', wl)
  -- Entries of jobs no longer waiting leave the tenant's line from its head (`within`), its tail here, and at the end
  -- of their job (TenantStore.unindex).
  local tail = redis.call('ZRANGE', ARGV[10], -2, -1)
  for _, t in ipairs(tail) do
    if redis.call('HGET', ARGV[3] .. t, 'status') ~= 'deferred' then redis.call('ZREM', ARGV[10], t) end
  end
end
local ready = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if ready and ready < tonumber(ARGV[9]) then redis.call('ZADD', KEYS[1], 'XX', ARGV[9], ARGV[1]) end
for i = 0, n - 1 do
  local b = 2 + 6 * i
  admit({KEYS[b + 3], KEYS[b + 4], KEYS[b + 5], KEYS[b + 6]}, KEYS[b + 1], KEYS[b + 2], tonumber(ARGV[12 + 2 * i]),
        ARGV[5], tonumber(ARGV[4]), ARGV[3], {KEYS[1], KEYS[2]},
        {ARGV[7] == '1', tonumber(ARGV[13 + 2 * i]), ARGV[8]}, out)
end
return out
"""
)

# KEYS: account hash. ARGV: now_s, base_s, cap_s, reason, jitter_s
# A 429 that said nothing about when to come back: cool for base * 2^(n-1) s (at most cap), n = rejections in a row
# without a success in between (`bo_n`; a success clears it). Never shortens a cooldown already in place.
# -> {until_s as a string, n}
BACKOFF = (
    _STATE
    + _HELD
    + _GATE
    + """
local n = redis.call('HINCRBY', KEYS[1], 'bo_n', 1)
local wait = math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) * 2 ^ (n - 1))
local new = tonumber(ARGV[1]) + wait
local current = tonumber(redis.call('HGET', KEYS[1], 'cooldown_until') or '0') or 0
redis.call('HINCRBY', KEYS[1], 'n:cooled', 1)
if new > current then
  redis.call('HSET', KEYS[1], 'cooldown_until', tostring(new), 'cooldown_reason', ARGV[4] .. ' (' .. wait .. ' s)')
  ramp_from(KEYS[1], {ramp_at = redis.call('HGET', KEYS[1], 'ramp_at')}, new, ARGV[5])
end
return {tostring(new), n}
"""
)

# KEYS: account hash. ARGV: rq_rem, rq_reset, rq_lim, tk_rem, tk_reset, tk_lim, tk_est, success ('' = not given)
# The readings behind admission (see _HELD). Responses arrive out of order: a reading for a later reset replaces the
# stored one (a new window); for the same reset the smaller remaining wins; an older window's reading is dropped.
# A success ends a run of rejections (the adaptive backoff starts short again).
RECORD_LIMITS = """
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
"""

# KEYS: account hash. ARGV: jitter_s, then per window: name, utilization, reset_s, ceiling, family ('-' = every job)
# The utilization readings behind window-aware admission (see _GATE). Responses arrive out of order: a reading for a
# later reset replaces the stored one (a new window; what one request adds, `est`, carries over; k = 1 reading); for
# the same reset the larger utilization wins, k counts the readings, and a rise over the stored utilization is a
# sample of what one request adds (est: the mean of the last sample and the previous est); an older window's
# reading is dropped. A window at or over its ceiling
# starts the ramp at its reset.
RECORD_UTIL = (
    _STATE
    + _HELD
    + _GATE
    + """
local names = redis.call('HGET', KEYS[1], 'pws') or ''
local st = {ramp_at = redis.call('HGET', KEYS[1], 'ramp_at')}
for i = 2, #ARGV, 5 do
  local w, u, reset, ceil, fam = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  local old = redis.call('HGET', KEYS[1], 'pu:' .. w)
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
    redis.call('HSET', KEYS[1], 'pu:' .. w,
      string.format('%.6g %.3f %.6g %s %s %d', value[1], value[2], value[3], ceil, fam, value[4]))
    if not string.find(' ' .. names .. ' ', ' ' .. w .. ' ', 1, true) then
      names = names == '' and w or (names .. ' ' .. w)
      redis.call('HSET', KEYS[1], 'pws', names)
    end
    if value[1] >= tonumber(ceil) - 1e-9 then ramp_from(KEYS[1], st, value[2], ARGV[1]) end
  end
end
return 1
"""
)
