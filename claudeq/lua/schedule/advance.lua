-- ADVANCE (ScheduleStore.fire_due, claudeq/schedules.py): move a schedule past the tick it was due at, only if that
-- is still its due tick, so each tick is advanced (and counted) once however many schedulers saw it.
-- KEYS: schedules-due.
-- ARGV: the schedule's member ({tenant}/{name}), the tick it was due at (epoch s), its next tick.
-- Result: 1 advanced, 0 not (another scheduler did, or it was paused, resumed or removed meanwhile).

local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
