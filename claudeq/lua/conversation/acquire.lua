-- ACQUIRE (ConversationStore, claudeq/conversations.py): the turn lock of a conversation. Waiters are scored by turn
-- number: the order of submit. Work: a fixed number of O(log n) commands (plus at most `pops` removals of finished
-- turns); no spec is read.
-- KEYS: lock, waiters, seq, this job's hash.
-- ARGV: job id, unused, job key prefix, ttl, pops
-- Result: {granted 0|1, holder or head to wait for}

--!include lib/next_turn.lua
--!include lib/turn_head.lua

local lock, waiters, me, ttl = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[4])
local holder = redis.call('GET', lock)
if holder == me then
  redis.call('EXPIRE', lock, ttl)
  return {1, me}
end
if not redis.call('ZSCORE', waiters, me) then
  -- Not in the order: it was let in after a turn of its own ran (a retry), or the job predates numbering at
  -- submit, or the order expired with the conversation. Its stored number keeps its place; none: the end of the line.
  local turn = redis.call('HGET', KEYS[4], 'turn')
  if turn then redis.call('ZADD', waiters, turn, me) else next_turn(KEYS[4], waiters, KEYS[3], me, ttl) end
end
redis.call('EXPIRE', waiters, ttl)
redis.call('EXPIRE', KEYS[3], ttl)
if holder and active(holder) then return {0, holder} end
local first = head(waiters, me, tonumber(ARGV[5]))
if first ~= me then return {0, first} end
redis.call('ZREM', waiters, me)
redis.call('SET', lock, me, 'EX', ttl)
return {1, me}
