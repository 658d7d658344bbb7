-- APPROVAL_OPEN (worker): the run of `fence` records its request to use a tool that waits for a person's
-- approval in the job hash's 'approval' field (JobRecord.approval), replacing the previous one; only while the job is
-- running under that fence (a run that lost the job records nothing). docs/jobs.md#tool-approval
-- KEYS: `job`
-- ARGV: `fence`, `approval_json`
-- Result: 1 (recorded) or 0 (the job is not this run's)

local job = KEYS[1]
local fence = ARGV[1]
local approval_json = ARGV[2]

local cur = redis.call('HMGET', job, 'status', 'fence')
if cur[1] ~= 'running' or cur[2] ~= fence then return 0 end
redis.call('HSET', job, 'approval', approval_json)
return 1
