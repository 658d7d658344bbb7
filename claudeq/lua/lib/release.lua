-- release(job, slots, hash, lines, max, expiry, now, job_prefix, jk, o, out): frees `job`'s slot, then hands the free
-- slots to the best waiters still `deferred` (`admit`, lib/admit.lua; their ids are added to `out`). With nobody in
-- line, that is the ZREM and one look at the lines (expired slots are left to the promoter's pass).

--!include lib/admit.lua

local function release(job, slots, hash, lines, max, expiry, now, job_prefix, jk, o, out)
  redis.call('ZREM', slots, job)
  if redis.call('EXISTS', lines[1], lines[2], lines[3], lines[4]) == 0 then return end
  admit(lines, slots, hash, max, expiry, now, job_prefix, jk, o, out)
end
