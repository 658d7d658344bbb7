-- APPROVAL_DECIDE (JobStore.decide_approval): answer the job's pending approval request, once. The decision goes
-- into the request (the job hash's 'approval' field), where the run that asked reads it; a second answer to the same
-- request is refused with the first one. docs/jobs.md#tool-approval
-- KEYS: `job`, `deferred`
-- ARGV: `request_id` ('' = the pending one), `tenant` ('' = the operator: any job), `decision_json`, `job_id`
-- Result: {'ok', approval_json} (decided now), {'decided', approval_json} (answered before), {'none'} (no such job,
--         or no request), {'other', approval_json} (request_id is not the job's latest request), {'tenant'} (the job
--         is another tenant's), {'stale', approval_json} (the run that asked is gone, or the job ended)

local job = KEYS[1]
local deferred = KEYS[2]
local request_id = ARGV[1]
local tenant = ARGV[2]
local decision_json = ARGV[3]
local job_id = ARGV[4]

local cur = redis.call('HMGET', job, 'status', 'fence', 'approval', 'spec')
if not cur[1] or not cur[3] then return {'none'} end
if tenant ~= '' then
  local owner = cjson.decode(cur[4])['tenant'] or 'default'
  if owner ~= tenant then return {'tenant'} end
end
local approval = cjson.decode(cur[3])
if request_id ~= '' and approval['request_id'] ~= request_id then return {'other', cur[3]} end
if approval['decision'] ~= nil and approval['decision'] ~= cjson.null then return {'decided', cur[3]} end
local parked = cur[1] == 'deferred' and approval['parked'] == true
if (cur[1] ~= 'running' and not parked) or tostring(approval['fence']) ~= cur[2] then return {'stale', cur[3]} end
-- Appended to the stored text, never re-encoded: cjson would turn the input's empty arrays into objects. The worker
-- stores a request without a `decision` key.
local stored = string.sub(cur[3], 1, -2) .. ',"decision":' .. decision_json .. '}'
redis.call('HSET', job, 'approval', stored)
-- A job that waits in the deferred set (its run stopped after the hold) is due now: the promoter queues it and its
-- next run delivers the decision.
if parked then redis.call('ZADD', deferred, redis.call('TIME')[1], job_id) end
return {'ok', stored}
