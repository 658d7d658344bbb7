"""The notifier: a job's end told to what its spec names — a webhook, signed the Standard Webhooks way, and Celery
`link` / `link_error` callbacks — by whichever worker is free, never in the run's own slot (docs/notifications.md).

The end is recorded where the job's terminal status is written, in the same script (claudeq/lua/lib/notify_end.lua
puts the job in the outbox, due now), so no end is left unannounced by a worker that dies right after it. Every
worker's notifier takes due jobs with a lease (claudeq/lua/outbox/claim.lua), delivers what is not delivered yet,
and settles: the delivery log in the record, the job out of the outbox when every notification is delivered or
dead, else due again after a backoff with jitter. A notifier that dies leaves the job due when its lease ends.

- A webhook is delivered at least once: a receiver deduplicates by `webhook-id`, which is the same on every try
  (`job_<id>_end`). 2xx is delivered; anything else, a redirect (not followed: it could leave the allowed hosts),
  a timeout or a refused connection is tried again, up to `notify_max_attempts` tries, then dead
  (`claudeq webhooks retry ID` tries again). Neither the URL nor a receiver's answer is logged or stored: either
  may carry what the receiver considers secret.
- A callback is sent exactly once: the message is pushed and the record marked in one script
  (claudeq/lua/outbox/link.lua).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import ssl
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from claudeq.broker import task_message
from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.models import TERMINAL, JobRecord, Notification, NotificationTarget, utcnow
from claudeq.permissions import callback_problems, webhook_problem

from ...config.settings import Settings
from ..delivery.ports import MetricsLike
from ..store.job_store import WorkerJobStore
from .webhook_target import Refused, resolve

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("claudeq.notifier")

#: The record field that says a callback was sent (one per target).
SENT_FIELD = {"link": "link_sent", "link_error": "link_error_sent"}
#: How often the events of a job its webhook follows are looked at while it runs, and before it runs (s); at most
#: how many per look.
EVENTS_POLL_S = 1.0
EVENTS_IDLE_POLL_S = 5.0
EVENTS_BATCH = 500
#: Jobs one worker delivers for at once; the longest wait between tries (s).
MAX_IN_FLIGHT = 32
MAX_BACKOFF_S = 600.0


def webhook_payload(record: JobRecord, body: str) -> dict[str, Any]:
    """What a webhook is sent: the record's public JSON, or (`result`) its id, status, result and error only (and a
    coding job's change: its result too, docs/jobs.md#coding-jobs)."""
    public = record.public()
    if body == "result":
        keys = (
            ("id", "status", "result", "error", "workspace")
            if record.workspace
            else ("id", "status", "result", "error")
        )
        return {key: public.get(key) for key in keys}
    return public


def backoff_s(attempts: int, base_s: float) -> float:
    """The wait after the `attempts`-th failed try: doubling from `base_s`, at most MAX_BACKOFF_S, with full jitter
    on its upper half (so receivers that came back are not hit by every retry at once)."""
    ceiling = min(MAX_BACKOFF_S, base_s * 2.0 ** max(0, attempts - 1))
    return float(ceiling / 2 + random.random() * ceiling / 2)


class Notifier:
    """One worker's notifier (its `once` runs on the engine loop, claudeq/worker/background/loops.py)."""

    def __init__(self, settings: Settings, store: WorkerJobStore, metrics: MetricsLike) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._http: httpx.AsyncClient | None = None

    @property
    def lease_s(self) -> float:
        """How long a taken job is this notifier's: a webhook's timeout, twice, and room to settle."""
        return self.settings.webhook_timeout_s * 2 + 30

    async def once(self) -> int:
        """Take the due jobs this notifier has room for and start delivering for each; -> how many it took."""
        room = MAX_IN_FLIGHT - len(self._in_flight)
        if room <= 0:
            return 0
        taken = await self.store.take_notifications(room, self.lease_s)
        for job_id in taken:
            if job_id in self._in_flight:
                continue
            task = asyncio.create_task(self._deliver(job_id), name=f"notify-{job_id}")
            self._in_flight[job_id] = task
            task.add_done_callback(functools.partial(self._done, job_id))
        return len(taken)

    def _done(self, job_id: str, _task: asyncio.Task[None]) -> None:
        self._in_flight.pop(job_id, None)

    async def close(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()
        if self._http is not None:
            await self._http.aclose()

    async def _deliver(self, job_id: str) -> None:
        try:
            await self.deliver(job_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # its lease ends and another pass takes it again; the others go on
            self.metrics.loop_item_failed("notifier")
            log.warning("job %s: delivering its notifications failed (%s: %s)", job_id, type(exc).__name__, exc)

    async def deliver(self, job_id: str) -> None:
        """Every notification of `job_id` not delivered yet, tried once; then settle."""
        try:
            record = await self.store.reads.get(job_id)
        except JobNotFound:  # its retention ended before anyone could tell: nothing left to send
            await self.store.drop_notifications(job_id)
            return
        except RecordUnreadable as exc:
            log.warning("job %s: record unreadable (%s); its notifications are dropped", job_id, exc.detail)
            await self.store.drop_notifications(job_id)
            return
        log_by_target = {n.target: n for n in record.notifications}
        cursor = ""
        polling = False  # its webhook follows the events of a job still active: look again soon
        targets = self.targets(record)
        if "events" in targets:
            entry = log_by_target.get("events") or Notification(target="events", updated_at=utcnow())
            if entry.state == "pending":
                entry, cursor = await self._events(record, entry)
                log_by_target["events"] = entry
                polling = entry.state == "pending" and entry.attempts == 0
        following = log_by_target.get("events")
        if record.status in TERMINAL and (following is None or following.state != "pending"):
            for target in targets:  # the end, after the events it follows
                if target == "events":
                    continue
                entry = log_by_target.get(target) or Notification(target=target, updated_at=utcnow())
                if entry.state == "pending":
                    log_by_target[target] = await self._end(record, target, entry)
        entries = list(log_by_target.values())
        pending = [n for n in entries if n.state == "pending"]
        next_due = ""
        failing = [n.attempts for n in pending if n.attempts > 0]
        if failing:
            next_due = repr(time.time() + backoff_s(max(failing), self.settings.notify_backoff_s))
        elif polling or (pending and record.status not in TERMINAL):
            # A job not started yet has no events to follow: looked at less often (its claim starts them).
            every = EVENTS_POLL_S if record.status == "running" else EVENTS_IDLE_POLL_S
            next_due = repr(time.time() + every)
        elif pending:
            next_due = repr(time.time())  # its events are caught up now: the end goes next pass
        dead = any(n.state == "dead" for n in entries)
        payload = json.dumps([n.model_dump(mode="json") for n in entries])
        await self.store.settle_notifications(job_id, payload, next_due, dead, cursor)

    async def _end(self, record: JobRecord, target: NotificationTarget, entry: Notification) -> Notification:
        """One try of an end notification, as its log entry after it."""
        outcome, status_code, error = await self._try(target, record)
        attempts = entry.attempts + 1
        state: Literal["pending", "delivered", "dead"] = "delivered" if outcome == "delivered" else "pending"
        if outcome == "dead" or (state == "pending" and attempts >= self.settings.notify_max_attempts):
            state = "dead"
        latency = (time.time() - record.finished_at.timestamp()) if record.finished_at else None
        self.metrics.notification(target, "failed" if state == "pending" else state, latency)
        if state == "dead":
            log.warning("job %s: %s given up after %d tries: %s", record.id, target, attempts, error)
        return Notification(
            target=target, state=state, attempts=attempts, status_code=status_code, error=error, updated_at=utcnow()
        )

    async def _events(self, record: JobRecord, entry: Notification) -> tuple[Notification, str]:
        """The job's events of the chosen types not sent yet, POSTed in order, each at least once (an event that
        fails is tried again, with the ones after it, after the backoff); -> its log entry and the entry id of the
        last event sent ('' = none this pass). Delivered once the job ended and every event was sent."""
        webhook = record.spec.webhook
        assert webhook is not None
        after = await self.store.webhook_cursor(record.id)
        if record.status not in TERMINAL:  # its worker stores the run's events at once while someone follows
            await self.store.reads.announce_follow(record.id)
        batch = await self.store.reads.events(record.id, after)
        wanted = set(webhook.events)
        sent, status_code = "", entry.status_code
        for entry_id, event in batch:
            if event.type in wanted:
                payload = {"id": record.id, "event_id": entry_id, "event": event.model_dump(mode="json")}
                outcome, status_code, error = await self._webhook(record, payload, f"job_{record.id}_{entry_id}")
                if outcome != "delivered":
                    attempts = entry.attempts + 1
                    dead = outcome == "dead" or attempts >= self.settings.notify_max_attempts
                    self.metrics.notification("events", "dead" if dead else "failed")
                    failed = Notification(
                        target="events",
                        state="dead" if dead else "pending",
                        attempts=attempts,
                        status_code=status_code,
                        error=error,
                        updated_at=utcnow(),
                    )
                    return failed, sent
                self.metrics.notification("events", "delivered", (utcnow() - event.at).total_seconds())
            sent = entry_id
        done = record.status in TERMINAL and len(batch) < EVENTS_BATCH
        state: Literal["pending", "delivered", "dead"] = "delivered" if done else "pending"
        return Notification(target="events", state=state, status_code=status_code, updated_at=utcnow()), sent

    @staticmethod
    def targets(record: JobRecord) -> list[NotificationTarget]:
        """What the job is told to: the events its webhook follows; once it ended, its webhook, and its `link` when
        it succeeded or `link_error` otherwise."""
        spec = record.spec
        out: list[NotificationTarget] = []
        if spec.webhook is not None and spec.webhook.events:
            out.append("events")
        if record.status not in TERMINAL:
            return out
        if spec.webhook is not None:
            out.append("webhook")
        if record.status == "succeeded" and spec.link is not None:
            out.append("link")
        if record.status != "succeeded" and spec.link_error is not None:
            out.append("link_error")
        return out

    async def _try(self, target: NotificationTarget, record: JobRecord) -> tuple[str, int | None, str | None]:
        """One try: (delivered | failed | dead, the receiver's status code, why it failed)."""
        if target == "webhook":
            return await self._webhook(record)
        callback = record.spec.link if target == "link" else record.spec.link_error
        assert callback is not None
        # Checked again here: the operator may have narrowed the allow-list, and anyone who can write to the Redis
        # can write a record; a callback never goes to a queue its tenant does not own.
        wrong = [reason for field, reason in callback_problems(record.spec, self.settings) if field.startswith(target)]
        if wrong:
            return "dead", None, f"{target}.queue: {wrong[0]}"
        message = task_message(callback.task, [record.public()], callback.queue, f"{record.id}-{target}")
        try:
            await self.store.send_callback(record.id, callback.queue, SENT_FIELD[target], message)
        except Exception as exc:  # Redis: tried again later
            return "failed", None, f"sending the callback failed ({type(exc).__name__})"
        return "delivered", None, None

    def _secret(self, tenant: str) -> str | None:
        config = self.settings.tenants.get(tenant)
        own = config.webhook_secret() if config is not None else None
        if own:
            return own
        return self.settings.webhook_secret.get_secret_value() if self.settings.webhook_secret else None

    async def _webhook(
        self, record: JobRecord, payload: dict[str, Any] | None = None, msg_id: str | None = None
    ) -> tuple[str, int | None, str | None]:
        """One POST of `payload` (default: the job's end) with id `msg_id`, signed: (outcome, status code, error)."""
        spec = record.spec.webhook
        assert spec is not None
        # The operator may have narrowed the lists since submit.
        wrong = webhook_problem(spec.url, self.settings.webhook_hosts, self.settings.webhook_ports)
        if wrong:
            return "dead", None, f"webhook.url: {wrong}"
        secret = self._secret(record.spec.tenant)
        if secret is None:
            return (
                "dead",
                None,
                (
                    f"no webhook secret for tenant {record.spec.tenant!r} (its webhook_secret_env, or "
                    "CLAUDEQ_WEBHOOK_SECRET on the workers)"
                ),
            )
        import httpx  # the worker's; not the testing kit's (claudeq.testing runs no notifier)
        from standardwebhooks.webhooks import Webhook

        try:
            signer = Webhook(secret)
        except Exception:
            return "dead", None, "the webhook secret is not a Standard Webhooks secret (whsec_ + base64)"
        if payload is None:
            payload = webhook_payload(record, spec.body)
        body = json.dumps(payload, separators=(",", ":")).encode()
        msg_id = msg_id or f"job_{record.id}_end"
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "user-agent": "claudeq-webhooks",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signer.sign(msg_id, now, body),
        }
        try:
            # Resolved once here, every address vetted, and the POST goes to that address: a name on the list
            # cannot lead to a loopback or private address (nor change its answer between check and connect).
            target = await resolve(spec.url, self.settings.webhook_allow_nets)
        except Refused as exc:
            return "dead", None, f"webhook.url: {exc}"
        headers["host"] = target.host_header
        extensions = {"sni_hostname": target.sni_hostname} if target.sni_hostname else {}
        if self._http is None:
            # A private CA when the operator names one; the certificate must name the URL's host either way.
            ca = self.settings.webhook_ca_file
            verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca)) if ca else True
            self._http = httpx.AsyncClient(follow_redirects=False, trust_env=False, verify=verify)
        try:
            answer = await self._http.post(
                target.url,
                content=body,
                headers=headers,
                timeout=self.settings.webhook_timeout_s,
                extensions=extensions,
            )
        except httpx.TimeoutException:
            return "failed", None, f"no answer within {self.settings.webhook_timeout_s:g} s"
        except httpx.HTTPError as exc:  # the URL is not in the message: it may carry the receiver's own secret
            return "failed", None, f"could not reach the receiver ({type(exc).__name__})"
        if 200 <= answer.status_code < 300:
            return "delivered", answer.status_code, None
        if 300 <= answer.status_code < 400:
            return "failed", answer.status_code, f"HTTP {answer.status_code}: redirects are not followed"
        return "failed", answer.status_code, f"HTTP {answer.status_code}"
