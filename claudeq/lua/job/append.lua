-- APPEND (WorkerJobStore): a run's events, refused once its fence no longer holds the running job (the run was taken
-- over, or the job moved on). Several events of a run go in one call (the worker batches what a run emits within a
-- few milliseconds).
-- KEYS: job, events.
-- ARGV: fence, events_maxlen, event JSON, ...
-- Result: the last entry id, or false when refused.

local cur = redis.call('HMGET', KEYS[1], 'fence', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= 'running' then
  return false
end
local id = false
for i = 3, #ARGV do id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'event', ARGV[i]) end
return id
