-- RELEASE (ConversationStore): let go of the turn lock.
-- KEYS: `lock`, `waiters`.
-- ARGV: `job_id`, `pops`, `job_key_prefix`
-- Result: the next waiting job id to promote, or false.

--!include lib/turn_head.lua

local lock = KEYS[1]
local waiters = KEYS[2]
local job_id = ARGV[1]
local pops = tonumber(ARGV[2])
local job_key_prefix = ARGV[3]

local me = job_id
if redis.call('GET', lock) == me then redis.call('DEL', lock) end
redis.call('ZREM', waiters, me)
local holder = redis.call('GET', lock)
if holder and active(job_key_prefix, holder) then return false end
local first = head(job_key_prefix, waiters, '', pops)
if first and active(job_key_prefix, first) then return first end
return false
