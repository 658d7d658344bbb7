-- APPEND (WorkerJobStore): a run's events, refused once its fence no longer holds the running job (the run was taken
-- over, or the job moved on). Several events of a run go in one call (the worker batches what a run emits within a
-- few milliseconds).
-- KEYS: `job`, `stream`.
-- ARGV: `fence`, `events_maxlen`, then `events`: the event JSONs.
-- Result: the last entry id, or false when refused.

--!include lib/args.lua

local job = KEYS[1]
local stream = KEYS[2]
local fence = ARGV[1]
local events_maxlen = ARGV[2]
local events = args_list(ARGV, 3)

local cur = redis.call('HMGET', job, 'fence', 'status')
if cur[1] ~= fence or cur[2] ~= 'running' then
  return false
end
local id = false
for _, event in ipairs(events) do id = redis.call('XADD', stream, 'MAXLEN', '~', events_maxlen, '*', 'event', event) end
return id
