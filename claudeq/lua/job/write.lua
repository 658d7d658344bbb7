-- WRITE (WorkerJobStore): the fenced write of a run: fields, a new status, and the events that go with it.
-- The events (what the run emitted since its last append, then the status's own: a terminal, `deferred` or
-- `requeued` one) go in with the status, under the same fence check: a follower that sees the status finds its
-- events, and a worker that lost the job appends nothing. A terminal write puts them straight into the record's
-- compacted `events` (after the stream's entries, with ids after the last one) instead of the stream it deletes, and
-- gives the job and its idempotency key the retention.
-- KEYS: `job`, `running`, `queued`, `deferred`, `stream` ('' = the job has no stream: a terminal write need not read
--       one; the caller knows when no event of the job ever went to one), `outbox` (a terminal write of a job with end
--       notifications puts it there: lib/notify_end.lua), `waiting` (its dependents leave it when they may run:
--       lib/release_dependents.lua)
-- ARGV: `job_id`, `fence`, `new_status` ('' = unchanged), `ttl_s`, `score` (ready time / send time),
--       `finished_counts_prefix`, `n_events`, `events_maxlen`, `now_ms`, `on_cancel`, then `events`: n_events event
--       JSONs, then `fields`: field, value, ...
-- on_cancel ('' for a write to no status or a terminal one): for a write to `queued` or `deferred`, what the job ends
-- with instead when its cancel flag is set (a cancel that came while it ran and nothing stopped the run yet, e.g.
-- between the claim and a deferral): the JSON list [cancelled event, error JSON, finished_at, how many of the
-- n_events at the end are the status's own (dropped)]. The job is then `cancelled` at once, like a cancel of a
-- queued or deferred job (docs/architecture.md#cancel-and-shutdown).
-- Result: a Write code (claudeq/lua/results.py): LOST (the fence no longer holds the running job: nothing written),
--   WRITTEN, CANCELLED (instead).

--!include lib/write.lua
--!include lib/args.lua

local job = KEYS[1]
local running = KEYS[2]
local queued = KEYS[3]
local deferred = KEYS[4]
local stream = KEYS[5]
local outbox = KEYS[6]
local waiting = KEYS[7]
local job_id = ARGV[1]
local fence = ARGV[2]
local new_status = ARGV[3]
local ttl_s = ARGV[4]
local score = ARGV[5]
local finished_counts_prefix = ARGV[6]
local n_events = tonumber(ARGV[7])
local events_maxlen = ARGV[8]
local now_ms = ARGV[9]
local on_cancel = ARGV[10]
local events = args_list(ARGV, 11, 10 + n_events)
local fields = args_list(ARGV, 11 + n_events)

return write({job = job, running = running, queued = queued, deferred = deferred, stream = stream, job_id = job_id,
              fence = fence, new_status = new_status, ttl_s = ttl_s, score = score,
              finished_counts_prefix = finished_counts_prefix, events_maxlen = events_maxlen, now_ms = now_ms,
              on_cancel = on_cancel, events = events, fields = fields}, outbox, waiting)
