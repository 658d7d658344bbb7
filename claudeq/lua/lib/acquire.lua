-- acquire(a): take a slot of an account for a job; `a` holds the arguments by the names account/acquire.lua gives
-- them (slots, account, lines, job_id, max_concurrency, expiry_s, now_s, rank, job_key_prefix, family, predictive,
-- ramp_rate, jitter_s, may_hold), and the answer is as it says. job/start.lua runs it with the attempt's start.

--!include lib/account_state.lua
--!include lib/gate.lua

local function acquire(a)
  local slots, account, lines, job_id = a.slots, a.account, a.lines, a.job_id
  local now, max = tonumber(a.now_s), tonumber(a.max_concurrency)
  local fam, predictive, rate = FAMS[tonumber(a.family)], a.predictive == '1', tonumber(a.ramp_rate)
  local st, n
  if a.may_hold ~= '' then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', a.now_s)
    st = account_state(account)
    if redis.call('ZSCORE', slots, job_id) then
      local others = redis.call('ZCARD', slots) - 1
      local closed = fam ~= '-' and (tonumber(st['cd:' .. fam] or '0') or 0) > now
      if closed or reserved(st, others, now, fam, predictive) then
        redis.call('ZREM', slots, job_id)
        return {{Slot.RESERVED}}
      end
      redis.call('ZADD', slots, a.expiry_s, job_id)
      return {{Slot.ACQUIRED}}
    end
    n = redis.call('ZCARD', slots)
  else
    st = account_state(account)
    n = redis.call('ZCOUNT', slots, '(' .. a.now_s, '+inf')
  end
  local g = gate(account, st, n, max, now, fam, predictive, rate, a.jitter_s)
  if g ~= {{Slot.OPEN}} then return g end
  -- With no rank, or no line holding anyone, the job is in no line. `wq` is set whenever a job joins a line
  -- (ADD_WAITER): without it the lines are empty and need no look; with it, the look clears it once they are.
  local waiting = a.rank == ''
  if not waiting and st.wq then
    waiting = redis.call('EXISTS', lines[1], lines[2], lines[3], lines[4]) > 0
    if not waiting then redis.call('HDEL', account, 'wq') end
  end
  if a.rank ~= '' then
    -- Waiters still deferred, ranked strictly before this job, in a line the account admits now, have first call on
    -- the free slots. During a ramp only one start is due (`paced` said so): however many slots are free, a waiter
    -- ranked before this job has first call on it.
    local free, ahead = max - n, 0
    local ramp_at = tonumber(st.ramp_at)
    if rate > 0 and ramp_at and now >= ramp_at and (tonumber(st.ramp_n) or 0) < max then free = 1 end
    for i = 1, 4 do
      if ahead >= free then break end
      if i == 1 or gate(account, st, n, max, now, FAMS[i], predictive, rate, a.jitter_s) == {{Slot.OPEN}} then
        local offset = 0
        while waiting and ahead < free do
          local e = redis.call('ZRANGEBYSCORE', lines[i], '-inf', '(' .. a.rank, 'LIMIT', offset, 1)
          if #e == 0 then break end
          if e[1] == job_id then
            offset = offset + 1
          elseif redis.call('HGET', a.job_key_prefix .. e[1], 'status') == 'deferred' then
            ahead = ahead + 1
            offset = offset + 1
          else
            redis.call('ZREM', lines[i], e[1])
          end
        end
      end
    end
    if ahead >= free then return {{Slot.IN_LINE}} end
  end
  redis.call('ZADD', slots, a.expiry_s, job_id)
  if waiting then redis.call('ZREM', lines[tonumber(a.family)], job_id) end
  redis.call('HINCRBY', account, 'n:acquired', 1)
  started(account, st, now)
  return {{Slot.ACQUIRED}}
end
