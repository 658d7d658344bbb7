-- LINK (worker/background/notifier.py): a job's Celery callback sent exactly once: the record marked and the message
-- pushed in one step, so a notifier that dies after it, or two that both hold the job, cannot send it twice.
-- KEYS: `job`, `queue`: the callback's queue list.
-- ARGV: `sent_field`: the record field that marks it sent, `message`: the broker message.
-- Result: 1 sent now, 0 sent before, -1 no record (its retention ended: nothing to send).

local job = KEYS[1]
local queue = KEYS[2]
local sent_field = ARGV[1]
local message = ARGV[2]

if redis.call('EXISTS', job) == 0 then return -1 end
if redis.call('HSETNX', job, sent_field, '1') == 0 then return 0 end
redis.call('LPUSH', queue, message)
return 1
