-- SETTLE (TenantStore): count a finished attempt's cost (lib/settle.lua).
-- KEYS: `spend_pairs`: (spend hash, reserved hash) pairs, see lib/settle.lua.
-- ARGV: `job_id`, `cost`, `hour_field`, `tenant_turn`, `account_turn`, `sample`, `ttl_s`, `drop` (see lib/settle.lua)
-- Result: 1

--!include lib/settle.lua
--!include lib/args.lua

local spend_pairs = args_list(KEYS, 1)
local job_id = ARGV[1]
local cost = ARGV[2]
local hour_field = ARGV[3]
local tenant_turn = ARGV[4]
local account_turn = ARGV[5]
local sample = ARGV[6]
local ttl_s = ARGV[7]
local drop = ARGV[8]

settle(spend_pairs, {job_id = job_id, cost = cost, hour_field = hour_field, tenant_turn = tenant_turn,
                     account_turn = account_turn, sample = sample, ttl_s = ttl_s, drop = drop})
return 1
