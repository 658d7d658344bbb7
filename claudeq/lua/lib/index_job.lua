-- index_job(index, id, created_ms, prefix, cutoff_ms, n): add job `id` created at `created_ms` to a tenant's job
-- index (`Keys.tenant_index`; id '' = add nothing) and drop up to `n` ids of expired jobs from its old end: entries
-- created before `cutoff_ms` (now less the retention) whose record is gone. Each new entry takes up to `n` (2)
-- expired ones out, so the index shrinks back as fast as jobs expire without a pass of its own; a job that outlives
-- the retention while active keeps its entry (and, at the very end, holds back the entries behind it until it
-- expires).

local function index_job(index, id, created_ms, prefix, cutoff_ms, n)
  if id ~= '' then redis.call('ZADD', index, created_ms, id) end
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', cutoff_ms, 'LIMIT', 0, n)
  for _, gone in ipairs(old) do
    if redis.call('EXISTS', prefix .. gone) == 0 then redis.call('ZREM', index, gone) end
  end
end
