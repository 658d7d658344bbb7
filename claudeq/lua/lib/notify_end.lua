-- notify_end(job_key, outbox, job_id, now_s): a job that ends with notifications to send (its record's `notify`
-- field, set at create when its spec names a webhook, a link or a link_error) goes into the outbox, due now, in the
-- same step as its terminal status: no end is ever left unannounced (docs/notifications.md). `outbox` '' or nil:
-- nothing to do. `now_s`: the caller's clock (epoch s), else Redis's own TIME.

local function notify_end(job_key, outbox, job_id, now_s)
  if outbox and outbox ~= '' and redis.call('HEXISTS', job_key, 'notify') == 1 then
    if not now_s then now_s = tonumber(redis.call('TIME')[1]) end
    redis.call('ZADD', outbox, 'NX', now_s, job_id)
  end
end
