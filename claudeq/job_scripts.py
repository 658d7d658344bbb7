"""Lua scripts for the job transitions producers start: create and cancel. Each runs atomically inside Redis.

Status lives in the job hash's `status` field and the fencing token in `fence` (the scripts only workers run — claim,
heartbeat, fenced write, promote, recover, resend — are in claudeq/worker/job_scripts.py).

The idempotency key (`idem:{key}`, named in the job hash's `idem` field) lives as long as its job: it has no expiry
until the job reaches a terminal state, then the job's retention. The scripts that finish a job read that name
from the hash, so claudeq needs a single Redis node (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

# KEYS: job, jobs, queued, idem ('' = none).
# ARGV: job_id, created_ms, now_s, job_key_prefix, field, value, ...
CREATE = """
if KEYS[4] ~= '' then
  local existing = redis.call('GET', KEYS[4])
  if existing and redis.call('EXISTS', ARGV[4] .. existing) == 1 then
    return {0, existing}
  end
  -- No expiry while the job is alive; finishing it gives the key the job's retention.
  redis.call('SET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[1], 'idem', KEYS[4])
end
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return {1, ARGV[1]}
"""

# KEYS: job, deferred, queued, cancel, events. ARGV: job_id, now_iso, ttl_s, error_json, event_json, events_maxlen
CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 'missing' end
if status == 'queued' or status == 'deferred' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[2], 'error', ARGV[4])
  redis.call('HDEL', KEYS[1], 'ready_at')
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  -- The event goes in with the status, so a follower that sees `cancelled` also finds the event.
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 'event', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', KEYS[5], ARGV[3])
  local idem = redis.call('HGET', KEYS[1], 'idem')
  if idem then redis.call('EXPIRE', idem, ARGV[3]) end
  return 'cancelled'
end
if status == 'running' then
  redis.call('SET', KEYS[4], '1', 'EX', ARGV[3])
  return 'running'
end
return status
"""
