-- ADD_WAITER (AccountStore): put a deferred job in its family's waiting line of each account at its rank (a job
-- already in line keeps its place; with a tenant line, the job joins it too and its hash records that line, 'tl', and
-- the account lines it sits in, 'wl': see 'within' in lib/admit.lua) and move its ready time in the deferred set out
-- to fallback_s (never earlier): in line, a freed slot is handed to it, and the ready time is only the fallback
-- should that never happen. A job deferred but not yet in line (its worker died in between) keeps the short ready
-- time it was deferred with. Then let each account admit: a slot may have been released between the caller's failed
-- acquire and this call, or the caller yielded to better-ranked waiters that nobody has promoted yet.
-- KEYS: `deferred`, `queued`, then `account_keys`: per account, its slots, its hash, its four lines.
-- ARGV: `job_id`, `rank`, `job_key_prefix`, `now_s`, `expiry_s`, `family` (its index, 1..4), `predictive`,
--       `jitter_s`, `fallback_s` (epoch), `tenant_line` ('' = none), `tenant_score`: the job's score in it, then
--       `account_args`: per account, its max_concurrency and ramp rate
-- Result: the ids handed a slot, now queued: the caller sends their messages (its own job among them when it is first
--   in line for a free slot).

--!include lib/admit.lua
--!include lib/args.lua

local deferred = KEYS[1]
local queued = KEYS[2]
local account_keys = args_list(KEYS, 3)
local job_id = ARGV[1]
local rank = ARGV[2]
local job_key_prefix = ARGV[3]
local now_s = tonumber(ARGV[4])
local expiry_s = ARGV[5]
local family = tonumber(ARGV[6])
local predictive = ARGV[7]
local jitter_s = ARGV[8]
local fallback_s = ARGV[9]
local tenant_line = ARGV[10]
local tenant_score = ARGV[11]
local account_args = args_list(ARGV, 12)

local out = {}
local n = #account_keys / 6
if redis.call('HGET', job_key_prefix .. job_id, 'status') ~= 'deferred' then return out end
local fi = family
for i = 0, n - 1 do
  redis.call('ZADD', account_keys[6 * i + 2 + fi], 'NX', rank, job_id)
  redis.call('HSET', account_keys[6 * i + 2], 'wq', '1')  -- someone may be in line: ACQUIRE looks (see there)
end
if tenant_line ~= '' then
  local job = job_key_prefix .. job_id
  redis.call('ZADD', tenant_line, 'NX', tenant_score, job_id)
  local wl = redis.call('HGET', job, 'wl') or ''
  for i = 0, n - 1 do
    local key = account_keys[6 * i + 2 + fi]
    if not string.find(' ' .. wl .. ' ', ' ' .. key .. ' ', 1, true) then
      wl = wl == '' and key or (wl .. ' ' .. key)
    end
  end
  redis.call('HSET', job, 'tl', tenant_line, 'wl', wl)
  -- Entries of jobs no longer waiting leave the tenant's line from its head (`within`), its tail here, and at the end
  -- of their job (TenantStore.unindex).
  local tail = redis.call('ZRANGE', tenant_line, -2, -1)
  for _, t in ipairs(tail) do
    if redis.call('HGET', job_key_prefix .. t, 'status') ~= 'deferred' then redis.call('ZREM', tenant_line, t) end
  end
end
local ready = tonumber(redis.call('ZSCORE', deferred, job_id))
if ready and ready < tonumber(fallback_s) then redis.call('ZADD', deferred, 'XX', fallback_s, job_id) end
for i = 0, n - 1 do
  local b = 6 * i
  local lines = {account_keys[b + 3], account_keys[b + 4], account_keys[b + 5], account_keys[b + 6]}
  admit(lines, account_keys[b + 1], account_keys[b + 2], tonumber(account_args[1 + 2 * i]), expiry_s, now_s,
        job_key_prefix, {deferred, queued}, {predictive == '1', tonumber(account_args[2 + 2 * i]), jitter_s}, out)
end
return out
