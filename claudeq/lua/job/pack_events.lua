-- PACK_EVENTS (WorkerJobStore.pack_events): a finished job's compacted events, compressed by the worker that
-- finished it, replace the JSON they were made from, if that is still what the record holds (a stale run's write
-- or a second end may have changed it since it was read: then nothing is replaced and the JSON stays readable).
-- KEYS: the job hash.
-- ARGV: the `events` field as it was read (compared whole: fakeredis's Lua has no redis.sha1hex), the compressed
--       bytes.
-- Result: 1 replaced, 0 not.

local current = redis.call('HGET', KEYS[1], 'events')
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'events', ARGV[2])
return 1
