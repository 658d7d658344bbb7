-- count_finished(prefix, st, ttl, now_s): count one more finished job of status `st` in the hash named
-- `prefix .. st`, under the hour by whose end its retention of `ttl` seconds is over (the exporter sums the hours
-- still to come: O(hours), never O(jobs)). `now_s`: the caller's clock (epoch s), else Redis's own TIME.

--!include lib/bump.lua

local function count_finished(prefix, st, ttl, now_s)
  if not now_s then now_s = tonumber(redis.call('TIME')[1]) end
  bump(prefix .. st, math.floor((now_s + tonumber(ttl)) / 3600) + 1, 1)
end
