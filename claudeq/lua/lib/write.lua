-- write(w, outbox, waiting) -> a Write code (claudeq/lua/results.py): LOST (the fence no longer holds the running job:
-- nothing written), WRITTEN, CANCELLED (instead, see on_cancel): the fenced write of a run; `w` holds its arguments by
-- the names job/write.lua gives them (job, running, queued, deferred, stream; job_id, fence, new_status, ttl_s, score,
-- finished_counts_prefix, events_maxlen, now_ms, on_cancel, events, fields; its n_events is #events). A run may write
-- only while the fence it was given still matches (a paused worker whose lease was taken over must not overwrite).
-- `outbox`, `waiting`: where a terminal write puts a job with end notifications (lib/notify_end.lua), and the waiting
-- set its dependents leave (lib/release_dependents.lua); nil for a write that is never terminal.

--!include lib/count_finished.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua
--!include lib/pack_events.lua

local function write(w, outbox, waiting)
  local job, job_id = w.job, w.job_id
  local cur = redis.call('HMGET', job, 'fence', 'status', 'idem', 'cancel', 'notify', 'dependents')
  if cur[1] ~= w.fence or cur[2] ~= 'running' then
    return {{Write.LOST}}
  end
  local n = #w.events
  local new = w.new_status
  local fields = {}
  for i = 1, #w.fields do fields[i] = w.fields[i] end
  local events, first, last = w.events, 1, n
  local answer = {{Write.WRITTEN}}
  if cur[4] and w.on_cancel ~= '' then
    -- cancelled while it ran: it ends now instead of waiting (`ready_at` is a deferral's, not a cancelled job's)
    local alt = cjson.decode(w.on_cancel)
    new, answer = 'cancelled', {{Write.CANCELLED}}
    local kept = {}
    for i = 1, #fields, 2 do
      if fields[i] ~= 'ready_at' then kept[#kept + 1], kept[#kept + 2] = fields[i], fields[i + 1] end
    end
    fields = kept
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] =
      'error', alt[2], 'finished_at', alt[3]
    local all = events
    events = {}
    for i = 1, n - alt[4] do events[#events + 1] = all[i] end
    events[#events + 1] = alt[1]
    first, last = 1, #events
    redis.call('HDEL', job, 'ready_at')
  end
  local terminal = new ~= '' and new ~= 'queued' and new ~= 'deferred'
  if not terminal then
    for i = first, last do redis.call('XADD', w.stream, 'MAXLEN', '~', w.events_maxlen, '*', 'event', events[i]) end
  end
  if new == '' then
    if #fields > 0 then redis.call('HSET', job, unpack(fields)) end
    return {{Write.WRITTEN}}
  end
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = new
  redis.call('ZREM', w.running, job_id)  -- out of `running`: its lease goes with it
  if new == 'queued' then
    redis.call('ZADD', w.queued, w.score, job_id)
  elseif new == 'deferred' then
    redis.call('ZADD', w.deferred, w.score, job_id)
  else
    -- the caller may bring them packed already (a job with no stream: WorkerJobStore's `pack`), as field `events`
    local given = false
    for i = 1, #fields, 2 do given = given or fields[i] == 'events' end
    local now_ms = tonumber(w.now_ms)
    local packed = not given and pack_events(w.stream, events, first, last, now_ms)
    if packed then
      fields[#fields + 1] = 'events'
      fields[#fields + 1] = packed
    end
    count_finished(w.finished_counts_prefix, new, w.ttl_s, now_ms / 1000)
    notify_end(outbox, job_id, cur[5], now_ms / 1000)
    release_dependents(job, job_id, new, cur[6], waiting, w.deferred, now_ms / 1000)
    if w.stream ~= '' then redis.call('DEL', w.stream) end
    redis.call('EXPIRE', job, w.ttl_s)
    if cur[3] then redis.call('EXPIRE', cur[3], w.ttl_s) end
    if cur[4] then redis.call('HDEL', job, 'cancel') end
  end
  redis.call('HSET', job, unpack(fields))
  return answer
end
