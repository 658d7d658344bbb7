-- CREATE (JobStore, claudeq/jobs/_store.py): write a new job: its hash, `jobs`, `queued`, its idempotency key, its
-- conversation turn and its tenant's index. A conversation turn is numbered here, at submit: the turn lock
-- (claudeq/conversations.py) follows that order. A batch submit writes a job with neither (no idempotency key, no
-- conversation) as the same three commands without the script, its index entries in one ZADD per set with the rest of
-- its batch (JobStore.create_many). The idempotency key gets no expiry while the job is alive; finishing it gives the
-- key the job's retention.
-- KEYS: `job`, `jobs`, `queued`, `idem` ('' = none), `conversation_waiters` ('' = none), `conversation_seq`,
--       `tenant_index` ('' = none), `waiting` (a job with 'deps' among its fields: JobSpec.depends_on), `outbox` (a
--       job with 'notify_events' among its fields goes there at once: its webhook follows its events,
--       worker/background/notifier.py)
-- ARGV: `job_id`, `created_ms`, `now_s`, `job_key_prefix`, `conversation_ttl_s`, `index_cutoff_ms`, `fields`: field,
--       value, ...
-- A job with dependencies (`deps`: JSON list of job ids, `dep_mode`: its on_dependency_failure) is created `waiting`
-- (in `waiting`, not `queued`: no message is sent for it) while one of them is active, each active one noting it in
-- its dependents set (lib/release_dependents.lua releases it); `queued` when all have ended as it needs.
-- Result: {1, job_id, waiting (1 or 0)} created, {0, existing job id} the idempotency key names a live job, {2,
--   dependency id, its status or 'missing'} a dependency is gone or ended so that the job would fail at once
--   (nothing written in either case).

--!include lib/next_turn.lua
--!include lib/index_job.lua
--!include lib/args.lua

local job = KEYS[1]
local jobs = KEYS[2]
local queued = KEYS[3]
local idem = KEYS[4]
local conversation_waiters = KEYS[5]
local conversation_seq = KEYS[6]
local tenant_index = KEYS[7]
local waiting = KEYS[8]
local outbox = KEYS[9]
local job_id = ARGV[1]
local created_ms = ARGV[2]
local now_s = ARGV[3]
local job_key_prefix = ARGV[4]
local conversation_ttl_s = ARGV[5]
local index_cutoff_ms = ARGV[6]
local fields = args_list(ARGV, 7)

if idem ~= '' then
  local existing = redis.call('GET', idem)
  if existing and redis.call('EXISTS', job_key_prefix .. existing) == 1 then
    return {0, existing}
  end
end
local deps, mode, follow = nil, 'fail', false
for i = 1, #fields - 1, 2 do
  if fields[i] == 'deps' then
    deps = fields[i + 1]
  elseif fields[i] == 'dep_mode' then
    mode = fields[i + 1]
  elseif fields[i] == 'notify_events' then
    follow = true
  end
end
local pending = {}
if deps then
  for _, d in ipairs(cjson.decode(deps)) do
    local st = redis.call('HGET', job_key_prefix .. d, 'status')
    if not st or ((st == 'failed' or st == 'cancelled') and mode ~= 'run') then return {2, d, st or 'missing'} end
    if st ~= 'succeeded' and st ~= 'failed' and st ~= 'cancelled' then pending[#pending + 1] = d end
  end
end
if idem ~= '' then
  -- No expiry while the job is alive; finishing it gives the key the job's retention.
  redis.call('SET', idem, job_id)
  redis.call('HSET', job, 'idem', idem)
end
redis.call('HSET', job, unpack(fields))
if conversation_waiters ~= '' then next_turn(job, conversation_waiters, conversation_seq, job_id, conversation_ttl_s) end
redis.call('ZADD', jobs, created_ms, job_id)
local is_waiting = 0
if #pending > 0 then
  is_waiting = 1
  redis.call('HSET', job, 'status', 'waiting', 'deps_left', #pending)
  redis.call('ZADD', waiting, now_s, job_id)
  for _, d in ipairs(pending) do
    redis.call('SADD', job_key_prefix .. d .. ':dependents', job_id)
    redis.call('HSET', job_key_prefix .. d, 'dependents', '1')
  end
else
  redis.call('ZADD', queued, now_s, job_id)
end
if tenant_index ~= '' then index_job(tenant_index, job_id, created_ms, job_key_prefix, index_cutoff_ms, 2) end
if follow and outbox then redis.call('ZADD', outbox, 'NX', now_s, job_id) end
return {1, job_id, is_waiting}
