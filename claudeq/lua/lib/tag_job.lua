-- tag_job(fair_share, job, tenant, weight) -> the tag, as a string: the job's virtual finish tag for weighted fair
-- queueing, as tenant/tag.lua says (job/submit.lua gives it to a job it created).

local function tag_job(fair_share, job, tenant, weight)
  local tag = redis.call('HGET', job, 'vtag')
  if tag then return tag end
  local v = tonumber(redis.call('HGET', fair_share, 'v') or '0') or 0
  local last = tonumber(redis.call('HGET', fair_share, 't:' .. tenant) or '0') or 0
  local start = v
  if last > start then start = last end
  tag = tostring(start + 1 / weight)
  redis.call('HSET', fair_share, 't:' .. tenant, tag)
  if redis.call('EXISTS', job) == 1 then redis.call('HSET', job, 'vtag', tag) end
  return tag
end
