-- ACQUIRE (AccountStore, claudeq/account_state.py): take a slot of the account for a job.
-- KEYS: slots, account hash, the four lines.
-- ARGV: job_id, max_concurrency, expiry_s, now_s, rank ('' = none), job_key_prefix, family index (1..4 in FAMS),
--       predictive ('1'/''), ramp rate, jitter_s, may hold ('1'/'': whether the job may hold a slot here already; ''
--       skips that check and counts the live slots without dropping the expired ones, which the promoter's pass
--       (`admit`) drops: two commands fewer on every first acquire)
-- Result: a Slot code (claudeq/lua/results.py): ACQUIRED (or already held: ZADD refreshes, so a redelivery never
--   takes two slots; a slot handed over by `admit` is taken this way, unless the job's family was closed meanwhile:
--   then it is given back, RESERVED), FULL, DISABLED, COOLING (the account, or the job's model family), HELD (see
--   lib/held.lua), IN_LINE (the free slots belong to waiters ranked before this job: it waits in line), RESERVED,
--   RAMPING (see lib/gate.lua). The account's state is checked here too, so a cooldown written by another worker a
--   moment ago is honoured even when the caller's snapshot was older. The attempt's start in the same script on a
--   worker: job/start.lua.

--!include lib/acquire.lua

return acquire(KEYS, ARGV)
