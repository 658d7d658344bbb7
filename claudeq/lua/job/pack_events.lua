-- PACK_EVENTS (WorkerJobStore.pack_events): a finished job's compacted events, compressed by the worker that
-- finished it, replace the JSON they were made from, if that is still what the record holds (a stale run's write
-- or a second end may have changed it since it was read: then nothing is replaced and the JSON stays readable).
-- KEYS: `job`: the job hash.
-- ARGV: `read`: the 'events' field as it was read (compared whole: fakeredis's Lua has no redis.sha1hex), `packed`:
--       the compressed bytes.
-- Result: 1 replaced, 0 not.

local job = KEYS[1]
local read = ARGV[1]
local packed = ARGV[2]

local current = redis.call('HGET', job, 'events')
if current ~= read then return 0 end
redis.call('HSET', job, 'events', packed)
return 1
