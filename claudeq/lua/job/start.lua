-- START (WorkerJobStore): an attempt's start in one round trip instead of two: the account slot (lib/acquire.lua)
-- and, when it is taken, the attempt's start written under the run's fence in the same step (a write that moves no
-- status and brings no event: the attempt's start, its account and attempts).
-- KEYS: account/acquire.lua's, then job/write.lua's (its outbox and waiting unused: a start is never terminal), each
--       named with its script's prefix: `acquire_slots`, `acquire_account`, `acquire_lines`, `write_job`,
--       `write_running`, `write_queued`, `write_deferred`, `write_stream`, `write_outbox`, `write_waiting`.
-- ARGV: account/acquire.lua's, then job/write.lua's: `acquire_job_id`, `acquire_max_concurrency`, `acquire_expiry_s`,
--       `acquire_now_s`, `acquire_rank`, `acquire_job_key_prefix`, `acquire_family`, `acquire_predictive`,
--       `acquire_ramp_rate`, `acquire_jitter_s`, `acquire_may_hold`, `write_job_id`, `write_fence`, `write_new_status`,
--       `write_ttl_s`, `write_score`, `write_finished_counts_prefix`, `write_n_events`, `write_events_maxlen`,
--       `write_now_ms`, `write_on_cancel`, `write_events`, `write_fields`.
-- Result: account/acquire.lua's answer; Slot.START_LOST: the slot was taken but the fence no longer holds the job
--   (nothing written; the slot is left to expire: the new owner may hold this very slot, members being job ids).

--!include lib/account_state.lua
--!include lib/acquire.lua
--!include lib/write.lua
--!include lib/args.lua

local acquire_slots = KEYS[1]
local acquire_account = KEYS[2]
local acquire_lines = args_list(KEYS, 3, 6)
local write_job = KEYS[7]
local write_running = KEYS[8]
local write_queued = KEYS[9]
local write_deferred = KEYS[10]
local write_stream = KEYS[11]
local write_outbox = KEYS[12]
local write_waiting = KEYS[13]
local acquire_job_id = ARGV[1]
local acquire_max_concurrency = ARGV[2]
local acquire_expiry_s = ARGV[3]
local acquire_now_s = ARGV[4]
local acquire_rank = ARGV[5]
local acquire_job_key_prefix = ARGV[6]
local acquire_family = ARGV[7]
local acquire_predictive = ARGV[8]
local acquire_ramp_rate = ARGV[9]
local acquire_jitter_s = ARGV[10]
local acquire_may_hold = ARGV[11]
local write_job_id = ARGV[12]
local write_fence = ARGV[13]
local write_new_status = ARGV[14]
local write_ttl_s = ARGV[15]
local write_score = ARGV[16]
local write_finished_counts_prefix = ARGV[17]
local write_n_events = tonumber(ARGV[18])
local write_events_maxlen = ARGV[19]
local write_now_ms = ARGV[20]
local write_on_cancel = ARGV[21]
local write_events = args_list(ARGV, 22, 21 + write_n_events)
local write_fields = args_list(ARGV, 22 + write_n_events)

local got = acquire({slots = acquire_slots, account = acquire_account, lines = acquire_lines, job_id = acquire_job_id,
                     max_concurrency = acquire_max_concurrency, expiry_s = acquire_expiry_s, now_s = acquire_now_s,
                     rank = acquire_rank, job_key_prefix = acquire_job_key_prefix, family = acquire_family,
                     predictive = acquire_predictive, ramp_rate = acquire_ramp_rate, jitter_s = acquire_jitter_s,
                     may_hold = acquire_may_hold})
if got ~= {{Slot.ACQUIRED}} then return got end
local w = {job = write_job, running = write_running, queued = write_queued, deferred = write_deferred,
           stream = write_stream, job_id = write_job_id, fence = write_fence, new_status = write_new_status,
           ttl_s = write_ttl_s, score = write_score, finished_counts_prefix = write_finished_counts_prefix,
           events_maxlen = write_events_maxlen, now_ms = write_now_ms, on_cancel = write_on_cancel,
           events = write_events, fields = write_fields}
if write(w) == {{Write.LOST}} then return {{Slot.START_LOST}} end
return {{Slot.ACQUIRED}}
