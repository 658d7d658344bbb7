"""Celery configuration derived from Settings (docs/architecture.md#celery-settings-for-long-runs)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit

from .settings import Settings

TASK_RUN = "claudeq.run"
#: The scheme of kombu's sentinel transport: one URL per sentinel, joined by `;` (docs/failover.md).
SENTINEL_SCHEME = "sentinel"


def broker_url(settings: Settings) -> str:
    """The broker URL: `redis_url`, or behind Sentinel one `sentinel://` URL per sentinel with `redis_url`'s
    username, password and db (the primary's name goes in the transport options)."""
    if not settings.sentinel_addresses:
        return settings.redis_url
    parts = urlsplit(settings.redis_url)
    auth = ""
    if parts.password:
        user, password = unquote(parts.username or ""), unquote(parts.password)
        auth = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    db = parts.path.strip("/") or "0"
    hosts = [(f"[{host}]" if ":" in host else host, port) for host, port in settings.sentinel_addresses]
    return ";".join(f"{SENTINEL_SCHEME}://{auth}{host}:{port}/{db}" for host, port in hosts)


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for producer and worker alike."""
    visibility = {"visibility_timeout": settings.visibility_timeout_s}
    return {
        "broker_url": broker_url(settings),
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": settings.queue,
        "task_routes": {TASK_RUN: {"queue": settings.queue}},
        # A started run is not lost with its worker; a worker holds only what it runs.
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "task_reject_on_worker_lost": True,
        # No ack emulation: kombu keeps no copy of each delivered message in Redis (its `unacked` hash and index, two
        # MULTI/EXEC blocks per message) and never redelivers one. The job record is the truth: a dead worker's run
        # is recovered from its expired lease, a message lost with a dead worker is sent again by the reconciler,
        # and what a worker holds unacked when it shuts down goes back to the queue
        # (docs/architecture.md#claim-lease-and-fence).
        # The visibility timeout, above the longest task in every place Celery reads it, matters only to a
        # deployment that turns ack emulation back on: Redis then never redelivers a live run.
        "broker_transport_options": {
            **visibility,
            "queue_order_strategy": "priority",
            "ack_emulation": False,
            **({"master_name": settings.redis_master_name} if settings.sentinel_addresses else {}),
        },
        "result_backend_transport_options": visibility,
        "visibility_timeout": settings.visibility_timeout_s,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_connection_retry_on_startup": True,
        "task_track_started": True,
        "worker_send_task_events": settings.celery_events,
        "task_send_sent_event": settings.celery_events,
        "worker_hijack_root_logger": False,
    }


def make_celery(settings: Settings, main: str = "claudeq") -> Any:
    """A Celery app configured from `settings` (not set as current, so several can live in one process)."""
    from celery import Celery

    app = Celery(main, set_as_current=False)
    app.conf.update(celery_config(settings))
    return app
