-- SUBMIT (JobStore.submit_call, claudeq/jobs/_store.py; in a batch, submit_many_call, the jobs whose write depends on
-- what Redis holds: an idempotency key, a conversation): a producer's submit of one job, atomic: the record as CREATE
-- writes it (lib/new_job.lua) and, only if it was created, the job's entry in its tenant's active-job index, its
-- fair-share tag (lib/tag_job.lua) and, unless it waits for its dependencies, its broker message
-- (claudeq/broker/_message.py). The producer builds the message at two priority steps (its own, and the broker's last
-- one: BACKLOG_PRIORITY); this script sends the second when the tenant has more than `backlog` jobs not finished, this
-- one included (docs/architecture.md#fair-share); a batch chose the step for its chunk and sends no second. The record
-- is the truth: a message that goes missing after it (a worker that died holding it) is re-sent by the reconciler.
-- KEYS: `tenant_jobs` (the active-job index of the job's governing tenant; '' = none, the fleet keeps none),
--       `fair_share` ('' = no tag: no tenants file), `broker_list` (the message's), `backlog_list` (the broker list of
--       the last priority step; '' = never backlogged), then job/create.lua's, each named with the prefix create:
--       `create_job`, `create_jobs`, `create_queued`, `create_idem`, `create_conversation_waiters`,
--       `create_conversation_seq`, `create_tenant_index`, `create_waiting`, `create_outbox`.
-- ARGV: `tenant` (the governing tenant's name), `weight` (its fair-share weight), `backlog` (TENANT_BACKLOG),
--       `message`, `backlog_message` (the same message at the last priority step; unused without a backlog list), then
--       job/create.lua's: `create_job_id`, `create_created_ms`, `create_now_s` (also the job's score in its
--       active-job index), `create_job_key_prefix`, `create_conversation_ttl_s`, `create_index_cutoff_ms`,
--       `create_fields`.
-- Result: job/create.lua's.

--!include lib/new_job.lua
--!include lib/tag_job.lua
--!include lib/args.lua

local tenant_jobs = KEYS[1]
local fair_share = KEYS[2]
local broker_list = KEYS[3]
local backlog_list = KEYS[4]
local create_job = KEYS[5]
local create_jobs = KEYS[6]
local create_queued = KEYS[7]
local create_idem = KEYS[8]
local create_conversation_waiters = KEYS[9]
local create_conversation_seq = KEYS[10]
local create_tenant_index = KEYS[11]
local create_waiting = KEYS[12]
local create_outbox = KEYS[13]
local tenant = ARGV[1]
local weight = ARGV[2]
local backlog = tonumber(ARGV[3])
local message = ARGV[4]
local backlog_message = ARGV[5]
local create_job_id = ARGV[6]
local create_created_ms = ARGV[7]
local create_now_s = ARGV[8]
local create_job_key_prefix = ARGV[9]
local create_conversation_ttl_s = ARGV[10]
local create_index_cutoff_ms = ARGV[11]
local create_fields = args_list(ARGV, 12)

local reply = new_job({job = create_job, jobs = create_jobs, queued = create_queued, idem = create_idem,
                       conversation_waiters = create_conversation_waiters,
                       conversation_seq = create_conversation_seq, tenant_index = create_tenant_index,
                       waiting = create_waiting, outbox = create_outbox, job_id = create_job_id,
                       created_ms = create_created_ms, now_s = create_now_s,
                       job_key_prefix = create_job_key_prefix, conversation_ttl_s = create_conversation_ttl_s,
                       index_cutoff_ms = create_index_cutoff_ms, fields = create_fields})
if reply[1] ~= 1 then return reply end
local backlogged = false
if tenant_jobs ~= '' then
  if fair_share ~= '' then tag_job(fair_share, create_job, tenant, tonumber(weight)) end
  backlogged = backlog_list ~= '' and redis.call('ZCARD', tenant_jobs) + 1 > backlog
  redis.call('ZADD', tenant_jobs, create_now_s, create_job_id)
end
if reply[3] == 0 then
  if backlogged then
    redis.call('LPUSH', backlog_list, backlog_message)
  else
    redis.call('LPUSH', broker_list, message)
  end
end
return reply
