-- ADVANCE (ScheduleStore.fire_due, claudeq/schedules.py): move a schedule past the tick it was due at, only if that
-- is still its due tick, so each tick is advanced (and counted) once however many schedulers saw it.
-- KEYS: `schedules_due`.
-- ARGV: `member`: the schedule's ({tenant}/{name}), `tick`: the one it was due at (epoch s), `following`: its next tick.
-- Result: 1 advanced, 0 not (another scheduler did, or it was paused, resumed or removed meanwhile).

local schedules_due = KEYS[1]
local member = ARGV[1]
local tick = ARGV[2]
local following = ARGV[3]

local current = redis.call('ZSCORE', schedules_due, member)
if not current or tonumber(current) ~= tonumber(tick) then return 0 end
redis.call('ZADD', schedules_due, following, member)
return 1
