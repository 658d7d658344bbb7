-- REGISTER (ConversationStore): number a turn that has no number yet.
-- KEYS: `job`, `waiters`, `seq`.
-- ARGV: `job_id`, `ttl`
-- Result: 1 numbered, 0 it had one.

--!include lib/next_turn.lua

local job = KEYS[1]
local waiters = KEYS[2]
local seq = KEYS[3]
local job_id = ARGV[1]
local ttl = ARGV[2]

if redis.call('HEXISTS', job, 'turn') == 1 then return 0 end
next_turn(job, waiters, seq, job_id, ttl)
return 1
