-- RELEASE (ConversationStore): let go of the turn lock.
-- KEYS: lock, waiters.
-- ARGV: job id, pops, job key prefix
-- Result: the next waiting job id to promote, or false.

--!include lib/turn_head.lua

local lock, waiters, me = KEYS[1], KEYS[2], ARGV[1]
if redis.call('GET', lock) == me then redis.call('DEL', lock) end
redis.call('ZREM', waiters, me)
local holder = redis.call('GET', lock)
if holder and active(holder) then return false end
local first = head(waiters, '', tonumber(ARGV[2]))
if first and active(first) then return first end
return false
