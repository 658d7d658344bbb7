-- REGISTER (ConversationStore): number a turn that has no number yet.
-- KEYS: job, waiters, seq.
-- ARGV: job id, ttl
-- Result: 1 numbered, 0 it had one.

--!include lib/next_turn.lua

if redis.call('HEXISTS', KEYS[1], 'turn') == 1 then return 0 end
next_turn(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return 1
