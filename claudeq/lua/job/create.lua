-- CREATE (JobStore, claudeq/jobs.py): write a new job: its hash, `jobs`, `queued`, its idempotency key, its
-- conversation turn and its tenant's index. A conversation turn is numbered here, at submit: the turn lock
-- (claudeq/conversations.py) follows that order. A batch submit writes a job with neither (no idempotency key, no
-- conversation) as the same three commands without the script, its index entries in one ZADD per set with the rest of
-- its batch (JobStore.create_many). The idempotency key gets no expiry while the job is alive; finishing it gives the
-- key the job's retention.
-- KEYS: job, jobs, queued, idem ('' = none), conversation waiters ('' = none), conversation seq, tenant index
--       ('' = none)
-- ARGV: job_id, created_ms, now_s, job_key_prefix, conversation ttl_s, index cutoff ms, field, value, ...
-- Result: {1, job_id} created, {0, existing job id} the idempotency key names a live job (nothing written).

--!include lib/next_turn.lua
--!include lib/index_job.lua

if KEYS[4] ~= '' then
  local existing = redis.call('GET', KEYS[4])
  if existing and redis.call('EXISTS', ARGV[4] .. existing) == 1 then
    return {0, existing}
  end
  -- No expiry while the job is alive; finishing it gives the key the job's retention.
  redis.call('SET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[1], 'idem', KEYS[4])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
if KEYS[5] ~= '' then next_turn(KEYS[1], KEYS[5], KEYS[6], ARGV[1], ARGV[5]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
if KEYS[7] ~= '' then index_job(KEYS[7], ARGV[1], ARGV[2], ARGV[4], ARGV[6], 2) end
return {1, ARGV[1]}
