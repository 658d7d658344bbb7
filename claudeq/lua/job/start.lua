-- START (WorkerJobStore): an attempt's start in one round trip instead of two: the account slot (lib/acquire.lua)
-- and, when it is taken, the attempt's start written under the run's fence in the same step (a write that moves no
-- status and brings no event: the attempt's start, its account and attempts).
-- KEYS: account/acquire.lua's six (slots, account hash, its four lines), then job/write.lua's seven (its outbox and waiting unused: a start is never terminal).
-- ARGV: account/acquire.lua's eleven, then job/write.lua's.
-- Result: account/acquire.lua's answer; Slot.START_LOST: the slot was taken but the fence no longer holds the job
--   (nothing written; the slot is left to expire: the new owner may hold this very slot, members being job ids).

--!include lib/account_state.lua
--!include lib/acquire.lua
--!include lib/write.lua

local got = acquire({unpack_(KEYS, 1, 6)}, {unpack_(ARGV, 1, 11)})
if got ~= {{Slot.ACQUIRED}} then return got end
if write({unpack_(KEYS, 7)}, {unpack_(ARGV, 12)}) == {{Write.LOST}} then return {{Slot.START_LOST}} end
return {{Slot.ACQUIRED}}
