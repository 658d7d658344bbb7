-- notify_end(outbox, job_id, flagged, now_s): a job that ends with notifications to send goes into the outbox, due
-- now, in the same step as its terminal status, so no end is ever left unannounced (docs/notifications.md).
-- `flagged`: its record's `notify` field as the caller read it (set at create when its spec names a webhook, a
-- link or a link_error; read with what the caller reads anyway: no command more for a job without one). `outbox`
-- '' or nil: nothing to do. `now_s`: the caller's clock (epoch s), else Redis's own TIME.

local function notify_end(outbox, job_id, flagged, now_s)
  if flagged and outbox and outbox ~= '' then
    if not now_s then now_s = tonumber(redis.call('TIME')[1]) end
    redis.call('ZADD', outbox, 'NX', now_s, job_id)
  end
end
