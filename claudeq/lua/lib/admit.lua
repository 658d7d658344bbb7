-- admit(lines, slots, hash, max, expiry, now, job_prefix, jk, o, out): hand an account's free slots to its best
-- waiters still `deferred`; their ids are added to `out`.
--
-- The waiting line (docs/architecture.md#the-waiting-line): the jobs waiting for a slot on an account are sorted sets
-- scored by rank (lower goes first: priority, then age; see worker/accounts/waiting_line.py), one line per model family
-- (`acct:{name}:waiters` for jobs of no particular family, `…:waiters:opus`, `…:sonnet`, `…:haiku`), so a family
-- held back on the account never blocks the others. A slot that frees goes to the best-ranked waiter still
-- `deferred` among the lines whose family the account admits now (`gate`): `admit` puts that job in the semaphore
-- itself (a handoff, with the slot's usual expiry) and promotes it in the same step (`deferred` -> `queued`, as
-- job/promote.lua does), so no job that arrives meanwhile can take that slot and no other account's line hands the
-- same job a second slot; the caller sends the named jobs' messages. The job's hash names the slots key it was
-- handed (`slot`): its next acquire looks for the slot there. Waiters no longer deferred (served by another account,
-- cancelled, finished) are dropped on the way. `lines` = the four line keys in FAMS order; `jk` = {deferred, queued}
-- keys; `o` = {predictive, rate, jitter}.
--
-- Priority within a tenant (with a tenants file; docs/architecture.md#fair-share): the lines are scored by virtual
-- finish tag, so the best-ranked waiter's tag says whose turn the slot is. The turn goes to that tenant's best job
-- still deferred in one of this account's open lines by priority, then creation time: the waiter's hash names its
-- tenant's line (`tl`: job -> priority x 1e10 + creation time, see account/add_waiter.lua). A better job found there
-- takes the turn and swaps tags with the waiter (`within`: in every line the waiter sits in, `wl`, and in the job
-- hashes' `vtag`), so the tenant's tags, its turns, are unchanged: its share is the same, and which of its jobs a
-- turn serves is decided by that order alone (jobs of one priority go in submit order whichever tags they hold).

--!include lib/account_state.lua
--!include lib/gate.lua

local function within(tl, w, ws, wline, lines, open, job_prefix)
  local wp = redis.call('ZSCORE', tl, w)
  if not wp then return w, wline end
  local cands = redis.call('ZRANGEBYSCORE', tl, '-inf', '(' .. wp, 'LIMIT', 0, 32)
  for _, c in ipairs(cands) do
    if redis.call('HGET', job_prefix .. c, 'status') ~= 'deferred' then
      redis.call('ZREM', tl, c)
    else
      for i = 1, 4 do
        local cs = open[i] and redis.call('ZSCORE', lines[i], c)
        if cs then
          local wjob = job_prefix .. w
          for key in string.gmatch(redis.call('HGET', wjob, 'wl') or '', '%S+') do
            redis.call('ZADD', key, 'XX', cs, w)
          end
          redis.call('ZADD', wline, 'XX', cs, w)
          redis.call('HSET', wjob, 'vtag', cs)
          redis.call('HSET', job_prefix .. c, 'vtag', ws)
          return c, lines[i]
        end
      end
    end
  end
  return w, wline
end
local function admit(lines, slots, hash, max, expiry, now, job_prefix, jk, o, out)
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local st = account_state(hash)
  while true do
    local n = redis.call('ZCARD', slots)
    local waiting = redis.call('EXISTS', lines[1], lines[2], lines[3], lines[4]) > 0
    local best, best_score, best_raw, best_line = nil, nil, nil, nil
    local open = {}
    for i = 1, 4 do
      if gate(hash, st, n, max, now, FAMS[i], o[1], o[2], o[3]) == {{Slot.OPEN}} then
        open[i] = true
        while waiting do
          local head = redis.call('ZRANGE', lines[i], 0, 0, 'WITHSCORES')
          if #head == 0 then break end
          if redis.call('HGET', job_prefix .. head[1], 'status') == 'deferred' then
            local score = tonumber(head[2])
            if best == nil or score < best_score then
              best, best_score, best_raw, best_line = head[1], score, head[2], lines[i]
            end
            break
          end
          redis.call('ZREM', lines[i], head[1])
        end
      end
    end
    if best == nil then return end
    local tl = redis.call('HGET', job_prefix .. best, 'tl')
    if tl then best, best_line = within(tl, best, best_raw, best_line, lines, open, job_prefix) end
    redis.call('ZREM', best_line, best)
    local job = job_prefix .. best
    if tl then
      redis.call('ZREM', tl, best)
      redis.call('HDEL', job, 'tl', 'wl')
    end
    redis.call('ZADD', slots, expiry, best)
    redis.call('HINCRBY', hash, 'n:acquired', 1)
    started(hash, st, now)
    redis.call('ZREM', jk[1], best)
    redis.call('HSET', job, 'status', 'queued', 'slot', slots)
    redis.call('HDEL', job, 'ready_at')
    redis.call('ZADD', jk[2], now, best)
    out[#out + 1] = best
  end
end
