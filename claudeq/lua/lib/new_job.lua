-- new_job(c): write a new job; `c` holds the arguments by the names job/create.lua gives them (job, jobs, queued,
-- idem, conversation_waiters, conversation_seq, tenant_index, waiting, outbox, job_id, created_ms, now_s,
-- job_key_prefix, conversation_ttl_s, index_cutoff_ms, fields), and the answer is as it says. job/submit.lua runs it
-- with the job's index entry, its fair-share tag and its broker message.

--!include lib/next_turn.lua
--!include lib/index_job.lua

local function new_job(c)
  local job, job_id, now_s, prefix, fields = c.job, c.job_id, c.now_s, c.job_key_prefix, c.fields
  if c.idem ~= '' then
    local existing = redis.call('GET', c.idem)
    if existing and redis.call('EXISTS', prefix .. existing) == 1 then
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
      local st = redis.call('HGET', prefix .. d, 'status')
      if not st or ((st == 'failed' or st == 'cancelled') and mode ~= 'run') then return {2, d, st or 'missing'} end
      if st ~= 'succeeded' and st ~= 'failed' and st ~= 'cancelled' then pending[#pending + 1] = d end
    end
  end
  if c.idem ~= '' then
    -- No expiry while the job is alive; finishing it gives the key the job's retention.
    redis.call('SET', c.idem, job_id)
    redis.call('HSET', job, 'idem', c.idem)
  end
  redis.call('HSET', job, unpack(fields))
  if c.conversation_waiters ~= '' then
    next_turn(job, c.conversation_waiters, c.conversation_seq, job_id, c.conversation_ttl_s)
  end
  redis.call('ZADD', c.jobs, c.created_ms, job_id)
  local is_waiting = 0
  if #pending > 0 then
    is_waiting = 1
    redis.call('HSET', job, 'status', 'waiting', 'deps_left', #pending)
    redis.call('ZADD', c.waiting, now_s, job_id)
    for _, d in ipairs(pending) do
      redis.call('SADD', prefix .. d .. ':dependents', job_id)
      redis.call('HSET', prefix .. d, 'dependents', '1')
    end
  else
    redis.call('ZADD', c.queued, now_s, job_id)
  end
  if c.tenant_index ~= '' then index_job(c.tenant_index, job_id, c.created_ms, prefix, c.index_cutoff_ms, 2) end
  if follow and c.outbox then redis.call('ZADD', c.outbox, 'NX', now_s, job_id) end
  return {1, job_id, is_waiting}
end
