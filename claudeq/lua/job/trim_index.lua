-- TRIM_INDEX (JobStore, claudeq/jobs.py): trim a tenant's index after a batch added to it with ZADD.
-- KEYS: tenant index.
-- ARGV: job key prefix, cutoff ms, n
-- Result: none (nil)

--!include lib/index_job.lua

index_job(KEYS[1], '', 0, ARGV[1], ARGV[2], tonumber(ARGV[3]))
