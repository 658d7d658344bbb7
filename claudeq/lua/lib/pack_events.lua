-- pack_events(stream, list, from, to, now_ms): the compacted `events` of a job that finishes now: the stream's
-- entries, then `list[from..to]` (events the finishing write brings, never written to the stream) with entry ids
-- after the stream's last one (`now_ms`-n, or the last id's millisecond when the clock is behind it). -> the JSON for
-- the record's `events` field (a list of [entry id, event JSON], as lib/compact_events.lua writes it), or nil when
-- there is nothing. The caller deletes the stream. `stream` '' = the job has none (nothing to read).

local function pack_events(stream, list, from, to, now_ms)
  local entries = {}
  if stream ~= '' then entries = redis.call('XRANGE', stream, '-', '+') end
  if #entries == 0 and to < from then return nil end
  local packed = {}
  local last_ms, last_seq = 0, -1
  for i, entry in ipairs(entries) do packed[i] = {entry[1], entry[2][2]} end
  if #entries > 0 then
    local id = entries[#entries][1]
    local dash = string.find(id, '-', 1, true)
    last_ms, last_seq = tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
  end
  local ms, seq = math.floor(now_ms), 0
  if ms <= last_ms then ms, seq = last_ms, last_seq + 1 end
  for i = from, to do
    packed[#packed + 1] = {string.format('%d-%d', ms, seq), list[i]}
    seq = seq + 1
  end
  return cjson.encode(packed)
end
