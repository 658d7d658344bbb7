-- next_turn(job, waiters, seq, id, ttl) -> the turn number: give job `id` (hash `job`) the next turn number of a
-- conversation (sorted set `waiters` scored by turn number, counter `seq`) and record both in the job hash (`turn`,
-- and `turns` = the waiters key, read back by job/cancel.lua). A counter that expired restarts after the highest
-- number still waiting, so order never goes backwards.

local function next_turn(job, waiters, seq, id, ttl)
  if redis.call('EXISTS', seq) == 0 then
    local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    redis.call('SET', seq, last[2] or 0)
  end
  local turn = redis.call('INCR', seq)
  redis.call('ZADD', waiters, turn, id)
  redis.call('HSET', job, 'turn', turn, 'turns', waiters)
  redis.call('EXPIRE', waiters, ttl)
  redis.call('EXPIRE', seq, ttl)
  return turn
end
