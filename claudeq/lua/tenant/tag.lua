-- TAG (TenantStore): the job's virtual finish tag for weighted fair queueing (docs/architecture.md#fair-share), issued
-- once per job and kept in its hash (`vtag`): max(system virtual time, the tenant's last tag) + 1 / weight. The
-- system virtual time (`v`) is the largest tag admitted so far (tenant/advance.lua). lib/tag_job.lua; a producer's
-- submit tags its job in job/submit.lua, a batch's plain jobs with TAG (JobStore.submit_many_call).
-- KEYS: `fair_share` (its hash), `job` (its hash).
-- ARGV: `tenant`, `weight`
-- Result: the tag, as a string.

--!include lib/tag_job.lua

local fair_share = KEYS[1]
local job = KEYS[2]
local tenant = ARGV[1]
local weight = tonumber(ARGV[2])

return tag_job(fair_share, job, tenant, weight)
