-- acquire(KEYS, ARGV): take a slot of an account for a job; KEYS, ARGV and the answer as account/acquire.lua says.
-- job/start.lua runs it with the attempt's start.

--!include lib/account_state.lua
--!include lib/gate.lua

local function acquire(KEYS, ARGV)
  local now, max = tonumber(ARGV[4]), tonumber(ARGV[2])
  local fam, predictive, rate = FAMS[tonumber(ARGV[7])], ARGV[8] == '1', tonumber(ARGV[9])
  local st, n
  if ARGV[11] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
    st = account_state(KEYS[2])
    if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
      local others = redis.call('ZCARD', KEYS[1]) - 1
      local closed = fam ~= '-' and (tonumber(st['cd:' .. fam] or '0') or 0) > now
      if closed or reserved(st, others, now, fam, predictive) then
        redis.call('ZREM', KEYS[1], ARGV[1])
        return {{Slot.RESERVED}}
      end
      redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
      return {{Slot.ACQUIRED}}
    end
    n = redis.call('ZCARD', KEYS[1])
  else
    st = account_state(KEYS[2])
    n = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[4], '+inf')
  end
  local g = gate(KEYS[2], st, n, max, now, fam, predictive, rate, ARGV[10])
  if g ~= {{Slot.OPEN}} then return g end
  -- With no rank, or no line holding anyone, the job is in no line. `wq` is set whenever a job joins a line
  -- (ADD_WAITER): without it the lines are empty and need no look; with it, the look clears it once they are.
  local waiting = ARGV[5] == ''
  if not waiting and st.wq then
    waiting = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], KEYS[6]) > 0
    if not waiting then redis.call('HDEL', KEYS[2], 'wq') end
  end
  if ARGV[5] ~= '' then
    -- Waiters still deferred, ranked strictly before this job, in a line the account admits now, have first call on
    -- the free slots. During a ramp only one start is due (`paced` said so): however many slots are free, a waiter
    -- ranked before this job has first call on it.
    local free, ahead = max - n, 0
    local ramp_at = tonumber(st.ramp_at)
    if rate > 0 and ramp_at and now >= ramp_at and (tonumber(st.ramp_n) or 0) < max then free = 1 end
    for i = 1, 4 do
      if ahead >= free then break end
      if i == 1 or gate(KEYS[2], st, n, max, now, FAMS[i], predictive, rate, ARGV[10]) == {{Slot.OPEN}} then
        local offset = 0
        while waiting and ahead < free do
          local e = redis.call('ZRANGEBYSCORE', KEYS[2 + i], '-inf', '(' .. ARGV[5], 'LIMIT', offset, 1)
          if #e == 0 then break end
          if e[1] == ARGV[1] then
            offset = offset + 1
          elseif redis.call('HGET', ARGV[6] .. e[1], 'status') == 'deferred' then
            ahead = ahead + 1
            offset = offset + 1
          else
            redis.call('ZREM', KEYS[2 + i], e[1])
          end
        end
      end
    end
    if ahead >= free then return {{Slot.IN_LINE}} end
  end
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  if waiting then redis.call('ZREM', KEYS[2 + tonumber(ARGV[7])], ARGV[1]) end
  redis.call('HINCRBY', KEYS[2], 'n:acquired', 1)
  started(KEYS[2], st, now)
  return {{Slot.ACQUIRED}}
end
