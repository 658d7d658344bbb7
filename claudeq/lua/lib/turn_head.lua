-- active(prefix, id), head(prefix, waiters, me, pops): the front of a conversation's turn order (`prefix`: the job key
-- prefix). A job is active while queued, deferred or running; any other status (or no record) frees what it held.
-- `head` pops finished turns off the front of the order, at most `pops` of them per call (each pop is O(log n) and
-- happens once per turn; a turn that finishes through a worker or a cancel leaves the order by itself): with pops to
-- spare it answers the first active turn (or `me`), else the finished turn it stopped at (the caller waits and
-- re-checks; the next call goes on popping).

local function active(prefix, id)
  local st = redis.call('HGET', prefix .. id, 'status')
  return st == 'queued' or st == 'deferred' or st == 'running'
end
local function head(prefix, waiters, me, pops)
  while true do
    local first = redis.call('ZRANGE', waiters, 0, 0)[1]
    if not first or first == me or active(prefix, first) then return first end
    if pops <= 0 then return first end
    redis.call('ZREM', waiters, first)
    pops = pops - 1
  end
end
