-- write(KEYS, ARGV, outbox, waiting) -> a Write code (claudeq/lua/results.py): LOST (the fence no longer holds the running job:
-- nothing written), WRITTEN, CANCELLED (instead, see on_cancel): the fenced write of a run; KEYS and ARGV as
-- job/write.lua says. A run may write only while the fence it was given still matches (a paused worker whose lease
-- was taken over must not overwrite). `outbox`, `waiting`: where a terminal write puts a job with end notifications
-- (lib/notify_end.lua), and the waiting set its dependents leave (lib/release_dependents.lua); nil for a write that is
-- never terminal.

--!include lib/count_finished.lua
--!include lib/notify_end.lua
--!include lib/release_dependents.lua
--!include lib/pack_events.lua

local function write(KEYS, ARGV, outbox, waiting)
  local cur = redis.call('HMGET', KEYS[1], 'fence', 'status', 'idem', 'cancel', 'notify', 'dependents')
  if cur[1] ~= ARGV[2] or cur[2] ~= 'running' then
    return {{Write.LOST}}
  end
  local n = tonumber(ARGV[7])
  local new = ARGV[3]
  local fields = {}
  for i = 11 + n, #ARGV do fields[#fields + 1] = ARGV[i] end
  local events, first, last = ARGV, 11, 10 + n
  local answer = {{Write.WRITTEN}}
  if cur[4] and ARGV[10] ~= '' then
    -- cancelled while it ran: it ends now instead of waiting (`ready_at` is a deferral's, not a cancelled job's)
    local alt = cjson.decode(ARGV[10])
    new, answer = 'cancelled', {{Write.CANCELLED}}
    local kept = {}
    for i = 1, #fields, 2 do
      if fields[i] ~= 'ready_at' then kept[#kept + 1], kept[#kept + 2] = fields[i], fields[i + 1] end
    end
    fields = kept
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] =
      'error', alt[2], 'finished_at', alt[3]
    events = {}
    for i = 11, 10 + n - alt[4] do events[#events + 1] = ARGV[i] end
    events[#events + 1] = alt[1]
    first, last = 1, #events
    redis.call('HDEL', KEYS[1], 'ready_at')
  end
  local terminal = new ~= '' and new ~= 'queued' and new ~= 'deferred'
  if not terminal then
    for i = first, last do redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[8], '*', 'event', events[i]) end
  end
  if new == '' then
    if #fields > 0 then redis.call('HSET', KEYS[1], unpack(fields)) end
    return {{Write.WRITTEN}}
  end
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = new
  redis.call('ZREM', KEYS[2], ARGV[1])  -- out of `running`: its lease goes with it
  if new == 'queued' then
    redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
  elseif new == 'deferred' then
    redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
  else
    -- the caller may bring them packed already (a job with no stream: WorkerJobStore's `pack`), as field `events`
    local given = false
    for i = 1, #fields, 2 do given = given or fields[i] == 'events' end
    local packed = not given and pack_events(KEYS[5], events, first, last, tonumber(ARGV[9]))
    if packed then
      fields[#fields + 1] = 'events'
      fields[#fields + 1] = packed
    end
    count_finished(ARGV[6], new, ARGV[4], tonumber(ARGV[9]) / 1000)
    notify_end(outbox, ARGV[1], cur[5], tonumber(ARGV[9]) / 1000)
    release_dependents(KEYS[1], ARGV[1], new, cur[6], waiting, KEYS[4], tonumber(ARGV[9]) / 1000)
    if KEYS[5] ~= '' then redis.call('DEL', KEYS[5]) end
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    if cur[3] then redis.call('EXPIRE', cur[3], ARGV[4]) end
    if cur[4] then redis.call('HDEL', KEYS[1], 'cancel') end
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  return answer
end
