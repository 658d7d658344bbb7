-- TRIM_INDEX (JobStore, claudeq/jobs/_store.py): trim a tenant's index after a batch added to it with ZADD.
-- KEYS: `index`: the tenant's.
-- ARGV: `job_key_prefix`, `cutoff_ms`, `n`
-- Result: none (nil)

--!include lib/index_job.lua

local index = KEYS[1]
local job_key_prefix = ARGV[1]
local cutoff_ms = ARGV[2]
local n = tonumber(ARGV[3])

index_job(index, '', 0, job_key_prefix, cutoff_ms, n)
