-- ACQUIRE (ConversationStore, claudeq/conversations.py): the turn lock of a conversation. Waiters are scored by turn
-- number: the order of submit. Work: a fixed number of O(log n) commands (plus at most `pops` removals of finished
-- turns); no spec is read.
-- KEYS: `lock`, `waiters`, `seq`, `job`: this job's hash.
-- ARGV: `job_id`, `unused` (a place kept, nothing read), `job_key_prefix`, `ttl`, `pops`
-- Result: {granted 0|1, holder or head to wait for}

--!include lib/next_turn.lua
--!include lib/turn_head.lua

local lock = KEYS[1]
local waiters = KEYS[2]
local seq = KEYS[3]
local job = KEYS[4]
local job_id = ARGV[1]
local unused = ARGV[2]
local job_key_prefix = ARGV[3]
local ttl = tonumber(ARGV[4])
local pops = tonumber(ARGV[5])

local me = job_id
local holder = redis.call('GET', lock)
if holder == me then
  redis.call('EXPIRE', lock, ttl)
  return {1, me}
end
if not redis.call('ZSCORE', waiters, me) then
  -- Not in the order: it was let in after a turn of its own ran (a retry), or the job predates numbering at
  -- submit, or the order expired with the conversation. Its stored number keeps its place; none: the end of the line.
  local turn = redis.call('HGET', job, 'turn')
  if turn then redis.call('ZADD', waiters, turn, me) else next_turn(job, waiters, seq, me, ttl) end
end
redis.call('EXPIRE', waiters, ttl)
redis.call('EXPIRE', seq, ttl)
if holder and active(job_key_prefix, holder) then return {0, holder} end
local first = head(job_key_prefix, waiters, me, pops)
if first ~= me then return {0, first} end
redis.call('ZREM', waiters, me)
redis.call('SET', lock, me, 'EX', ttl)
return {1, me}
