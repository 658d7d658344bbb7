-- CREATE (JobStore, claudeq/jobs.py): write a new job: its hash, `jobs`, `queued`, its idempotency key, its
-- conversation turn and its tenant's index. A conversation turn is numbered here, at submit: the turn lock
-- (claudeq/conversations.py) follows that order. A batch submit writes a job with neither (no idempotency key, no
-- conversation) as the same three commands without the script, its index entries in one ZADD per set with the rest of
-- its batch (JobStore.create_many). The idempotency key gets no expiry while the job is alive; finishing it gives the
-- key the job's retention.
-- KEYS: job, jobs, queued, idem ('' = none), conversation waiters ('' = none), conversation seq, tenant index
--       ('' = none), waiting (a job with `deps` among its fields: JobSpec.depends_on), outbox (a job with
--       `notify_events` among its fields goes there at once: its webhook follows its events, worker/background/notifier.py)
-- ARGV: job_id, created_ms, now_s, job_key_prefix, conversation ttl_s, index cutoff ms, field, value, ...
-- A job with dependencies (`deps`: JSON list of job ids, `dep_mode`: its on_dependency_failure) is created `waiting`
-- (in `waiting`, not `queued`: no message is sent for it) while one of them is active, each active one noting it in
-- its dependents set (lib/release_dependents.lua releases it); `queued` when all have ended as it needs.
-- Result: {1, job_id, waiting (1 or 0)} created, {0, existing job id} the idempotency key names a live job, {2,
--   dependency id, its status or 'missing'} a dependency is gone or ended so that the job would fail at once
--   (nothing written in either case).

--!include lib/next_turn.lua
--!include lib/index_job.lua

if KEYS[4] ~= '' then
  local existing = redis.call('GET', KEYS[4])
  if existing and redis.call('EXISTS', ARGV[4] .. existing) == 1 then
    return {0, existing}
  end
end
local deps, mode, follow = nil, 'fail', false
for i = 7, #ARGV - 1, 2 do
  if ARGV[i] == 'deps' then
    deps = ARGV[i + 1]
  elseif ARGV[i] == 'dep_mode' then
    mode = ARGV[i + 1]
  elseif ARGV[i] == 'notify_events' then
    follow = true
  end
end
local pending = {}
if deps then
  for _, d in ipairs(cjson.decode(deps)) do
    local st = redis.call('HGET', ARGV[4] .. d, 'status')
    if not st or ((st == 'failed' or st == 'cancelled') and mode ~= 'run') then return {2, d, st or 'missing'} end
    if st ~= 'succeeded' and st ~= 'failed' and st ~= 'cancelled' then pending[#pending + 1] = d end
  end
end
if KEYS[4] ~= '' then
  -- No expiry while the job is alive; finishing it gives the key the job's retention.
  redis.call('SET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[1], 'idem', KEYS[4])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
if KEYS[5] ~= '' then next_turn(KEYS[1], KEYS[5], KEYS[6], ARGV[1], ARGV[5]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
local waiting = 0
if #pending > 0 then
  waiting = 1
  redis.call('HSET', KEYS[1], 'status', 'waiting', 'deps_left', #pending)
  redis.call('ZADD', KEYS[8], ARGV[3], ARGV[1])
  for _, d in ipairs(pending) do
    redis.call('SADD', ARGV[4] .. d .. ':dependents', ARGV[1])
    redis.call('HSET', ARGV[4] .. d, 'dependents', '1')
  end
else
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
end
if KEYS[7] ~= '' then index_job(KEYS[7], ARGV[1], ARGV[2], ARGV[4], ARGV[6], 2) end
if follow and KEYS[9] then redis.call('ZADD', KEYS[9], 'NX', ARGV[3], ARGV[1]) end
return {1, ARGV[1], waiting}
