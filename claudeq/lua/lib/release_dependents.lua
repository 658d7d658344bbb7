-- release_dependents(job_key, job_id, status, flagged, waiting, deferred, now_s): the end of a job other jobs wait
-- for (`depends_on`). Each of its dependents still `waiting` counts it: one whose dependencies have all ended as it
-- needs (succeeded, or anything with on_dependency_failure = "run") is due now, and so is one a failure dooms (the
-- worker that takes it fails it, kind `dependency`, through the ordinary terminal write: its own dependents follow
-- in turn). `flagged`: the record's `dependents` field as the caller read it (no command more for a job that has
-- none). The dependents set (`job_key .. ':dependents'`, Keys.dependents) goes with it.

local function release_dependents(job_key, job_id, status, flagged, waiting, deferred, now_s)
  if not flagged or not waiting or waiting == '' then return end
  local set = job_key .. ':dependents'
  local prefix = string.sub(job_key, 1, #job_key - #job_id)
  if not now_s then now_s = tonumber(redis.call('TIME')[1]) end
  for _, d in ipairs(redis.call('SMEMBERS', set)) do
    local dk = prefix .. d
    local cur = redis.call('HMGET', dk, 'status', 'dep_mode')
    if cur[1] == 'waiting' then
      local due = status ~= 'succeeded' and cur[2] ~= 'run'
      if not due then due = redis.call('HINCRBY', dk, 'deps_left', -1) <= 0 end
      if due then
        redis.call('HSET', dk, 'status', 'deferred')
        redis.call('ZREM', waiting, d)
        redis.call('ZADD', deferred, now_s, d)
      end
    end
  end
  redis.call('DEL', set)
end
