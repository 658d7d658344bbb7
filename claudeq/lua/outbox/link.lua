-- LINK (worker/background/notifier.py): a job's Celery callback sent exactly once: the record marked and the message pushed in
-- one step, so a notifier that dies after it, or two that both hold the job, cannot send it twice.
-- KEYS: job, the callback's queue list.
-- ARGV: the record field that marks it sent, the broker message.
-- Result: 1 sent now, 0 sent before, -1 no record (its retention ended: nothing to send).

if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HSETNX', KEYS[1], ARGV[1], '1') == 0 then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
