-- CREATE (JobStore, claudeq/jobs/_store.py): write a new job: its hash, `jobs`, `queued`, its idempotency key, its
-- conversation turn and its tenant's index (lib/new_job.lua; job/submit.lua writes the same with the job's
-- active-job index entry, fair-share tag and broker message: a producer's submit). A conversation turn is numbered
-- here, at submit: the turn lock (claudeq/conversations.py) follows that order. A batch submit writes a job with
-- neither (no idempotency key, no conversation) as the same three commands without the script, its index entries in
-- one ZADD per set with the rest of its batch (JobStore.create_many). The idempotency key gets no expiry while the job
-- is alive; finishing it gives the key the job's retention.
-- KEYS: `job`, `jobs`, `queued`, `idem` ('' = none), `conversation_waiters` ('' = none), `conversation_seq`,
--       `tenant_index` ('' = none), `waiting` (a job with 'deps' among its fields: JobSpec.depends_on), `outbox` (a
--       job with 'notify_events' among its fields goes there at once: its webhook follows its events,
--       worker/background/notifier.py)
-- ARGV: `job_id`, `created_ms`, `now_s`, `job_key_prefix`, `conversation_ttl_s`, `index_cutoff_ms`, `fields`: field,
--       value, ...
-- A job with dependencies (`deps`: JSON list of job ids, `dep_mode`: its on_dependency_failure) is created `waiting`
-- (in `waiting`, not `queued`: no message is sent for it) while one of them is active, each active one noting it in
-- its dependents set (lib/release_dependents.lua releases it); `queued` when all have ended as it needs.
-- Result: {1, job_id, waiting (1 or 0)} created, {0, existing job id} the idempotency key names a live job, {2,
--   dependency id, its status or 'missing'} a dependency is gone or ended so that the job would fail at once
--   (nothing written in either case).

--!include lib/new_job.lua
--!include lib/args.lua

local job = KEYS[1]
local jobs = KEYS[2]
local queued = KEYS[3]
local idem = KEYS[4]
local conversation_waiters = KEYS[5]
local conversation_seq = KEYS[6]
local tenant_index = KEYS[7]
local waiting = KEYS[8]
local outbox = KEYS[9]
local job_id = ARGV[1]
local created_ms = ARGV[2]
local now_s = ARGV[3]
local job_key_prefix = ARGV[4]
local conversation_ttl_s = ARGV[5]
local index_cutoff_ms = ARGV[6]
local fields = args_list(ARGV, 7)

return new_job({job = job, jobs = jobs, queued = queued, idem = idem, conversation_waiters = conversation_waiters,
                conversation_seq = conversation_seq, tenant_index = tenant_index, waiting = waiting,
                outbox = outbox, job_id = job_id, created_ms = created_ms, now_s = now_s,
                job_key_prefix = job_key_prefix, conversation_ttl_s = conversation_ttl_s,
                index_cutoff_ms = index_cutoff_ms, fields = fields})
