-- ADD_WAITER (AccountStore): put a deferred job in its family's waiting line of each account at its rank (a job
-- already in line keeps its place; with a tenant line, the job joins it too and its hash records that line, `tl`, and
-- the account lines it sits in, `wl`: see `within` in lib/admit.lua) and move its ready time in the deferred set out
-- to `fallback_s` (never earlier): in line, a freed slot is handed to it, and the ready time is only the fallback
-- should that never happen. A job deferred but not yet in line (its worker died in between) keeps the short ready
-- time it was deferred with. Then let each account admit: a slot may have been released between the caller's failed
-- acquire and this call, or the caller yielded to better-ranked waiters that nobody has promoted yet.
-- KEYS: deferred, queued, then per account: slots, account hash, the four lines.
-- ARGV: job_id, rank, job_key_prefix, now_s, expiry_s, family index (1..4), predictive, jitter_s, fallback_s (epoch),
--       tenant line ('' = none), the job's score in it, then per account: max_concurrency, ramp rate
-- Result: the ids handed a slot, now queued: the caller sends their messages (its own job among them when it is first
--   in line for a free slot).

--!include lib/admit.lua

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
