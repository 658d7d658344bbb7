-- FINISH (WorkerJobStore): a job's end in one round trip instead of four: the terminal write (lib/write.lua), the
-- attempt's spend counted (lib/settle.lua), the slot freed and handed to the best waiters (lib/release.lua: the ids,
-- now queued, whose messages the caller sends), the job out of the index.
-- KEYS: job/write.lua's seven (`write_job`, `write_running`, `write_queued`, `write_deferred`, `write_stream`,
--       `write_outbox`, `write_waiting`), then the run's account slot: `slots`, `account` (its hash), `lines` (its
--       four); then `spend_pairs`: the spend and reserved hashes its last attempt's cost counts against (none, or a
--       pair or two); then `unindex`: the sorted sets the finished job leaves (its tenants' active-job index).
-- ARGV: account/release.lua's (minus the job id): `job_key_prefix`, `now_s`, `max_concurrency`, `expiry_s`,
--       `predictive`, `ramp_rate`, `jitter_s`; then `n_spend`: how many spend keys there are, and settle's eight
--       (tenant/settle.lua's, '' each when none): `settle_job_id`, `settle_cost`, `settle_hour_field`,
--       `settle_tenant_turn`, `settle_account_turn`, `settle_sample`, `settle_ttl_s`, `settle_drop`; then
--       job/write.lua's: `write_job_id`, `write_fence`, `write_new_status`, `write_ttl_s`, `write_score`,
--       `write_finished_counts_prefix`, `write_n_events`, `write_events_maxlen`, `write_now_ms`, `write_on_cancel`,
--       `write_events`, `write_fields`.
-- Result: {0} when the fence no longer holds the job (nothing written, released or counted: the new owner may hold
--   this very slot, and the caller counts the spend itself), else {1, ids...}.

--!include lib/account_state.lua
--!include lib/release.lua
--!include lib/settle.lua
--!include lib/write.lua
--!include lib/args.lua

local write_job = KEYS[1]
local write_running = KEYS[2]
local write_queued = KEYS[3]
local write_deferred = KEYS[4]
local write_stream = KEYS[5]
local write_outbox = KEYS[6]
local write_waiting = KEYS[7]
local slots = KEYS[8]
local account = KEYS[9]
local lines = args_list(KEYS, 10, 13)
local job_key_prefix = ARGV[1]
local now_s = tonumber(ARGV[2])
local max_concurrency = tonumber(ARGV[3])
local expiry_s = ARGV[4]
local predictive = ARGV[5]
local ramp_rate = tonumber(ARGV[6])
local jitter_s = ARGV[7]
local n_spend = tonumber(ARGV[8])
local spend_pairs = args_list(KEYS, 14, 13 + n_spend)
local unindex = args_list(KEYS, 14 + n_spend)
local settle_job_id = ARGV[9]
local settle_cost = ARGV[10]
local settle_hour_field = ARGV[11]
local settle_tenant_turn = ARGV[12]
local settle_account_turn = ARGV[13]
local settle_sample = ARGV[14]
local settle_ttl_s = ARGV[15]
local settle_drop = ARGV[16]
local write_job_id = ARGV[17]
local write_fence = ARGV[18]
local write_new_status = ARGV[19]
local write_ttl_s = ARGV[20]
local write_score = ARGV[21]
local write_finished_counts_prefix = ARGV[22]
local write_n_events = tonumber(ARGV[23])
local write_events_maxlen = ARGV[24]
local write_now_ms = ARGV[25]
local write_on_cancel = ARGV[26]
local write_events = args_list(ARGV, 27, 26 + write_n_events)
local write_fields = args_list(ARGV, 27 + write_n_events)

local w = {job = write_job, running = write_running, queued = write_queued, deferred = write_deferred,
           stream = write_stream, job_id = write_job_id, fence = write_fence, new_status = write_new_status,
           ttl_s = write_ttl_s, score = write_score, finished_counts_prefix = write_finished_counts_prefix,
           events_maxlen = write_events_maxlen, now_ms = write_now_ms, on_cancel = write_on_cancel,
           events = write_events, fields = write_fields}
if write(w, write_outbox, write_waiting) == {{Write.LOST}} then return {0} end
if n_spend > 0 then
  settle(spend_pairs, {job_id = settle_job_id, cost = settle_cost, hour_field = settle_hour_field,
                       tenant_turn = settle_tenant_turn, account_turn = settle_account_turn, sample = settle_sample,
                       ttl_s = settle_ttl_s, drop = settle_drop})
end
local out = {1}
release(write_job_id, slots, account, lines, max_concurrency, expiry_s, now_s, job_key_prefix,
        {write_deferred, write_queued}, {predictive == '1', ramp_rate, jitter_s}, out)
for _, index in ipairs(unindex) do redis.call('ZREM', index, write_job_id) end
return out
