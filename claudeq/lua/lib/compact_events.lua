-- compact_events(job, stream): move a finished job's event stream into its record (`events`: a JSON list of
-- [entry id, event JSON]) and delete the stream: a stream costs ~4.7 KB however few its events, the field about
-- their JSON size, and it expires with the record. JobStore.read_events reads both.

local function compact_events(job, stream)
  local entries = redis.call('XRANGE', stream, '-', '+')
  if #entries == 0 then return end
  local packed = {}
  for i, entry in ipairs(entries) do packed[i] = {entry[1], entry[2][2]} end
  redis.call('HSET', job, 'events', cjson.encode(packed))
  redis.call('DEL', stream)
end
