"""kombu's Redis transport for the worker, with one change: an entry of a queue's list that is not a message
(not JSON, JSON without a message's `properties`, …) is dropped with a log line.

Unchanged kombu decodes each entry it pops inside its event loop, so one such entry raised out of the loop and
Celery stopped the whole worker ("Unrecoverable error"), runs in flight included; a restarted worker died on the
next one. A dropped entry loses nothing: the record, not the broker message, is the truth, and a queued job whose
message never arrives is sent again (docs/architecture.md#background-loops). `create_app` (worker/app.py) selects
this transport for `redis://` and `rediss://` broker URLs.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger("claudeq.broker")

#: What reading a malformed entry raises in kombu: JSON decoding (ValueError), a payload that is not an object or
#: lacks a message's fields (TypeError, KeyError, AttributeError).
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)


class DroppingReader:
    """A channel's BRPOP reader that drops what it cannot read as a message (mixed into kombu's channels)."""

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))  # type: ignore[misc]
        except UNREADABLE as exc:
            # The entry was popped already: it is gone. Only the kind of error is logged, never the entry.
            log.error("broker: dropped a queue entry that is not a Celery message (%s)", type(exc).__name__)
            return True


class Channel(DroppingReader, kombu_redis.Channel):
    """A Redis channel whose BRPOP reader drops what it cannot read as a message."""


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with the channel above."""

    Channel = Channel


class SentinelChannel(DroppingReader, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel (it asks the sentinels for the primary on each connect), reading as `Channel` does."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport (`sentinel://` URLs, `master_name` in the transport options) with the channel
    above: behind Sentinel (docs/failover.md)."""

    Channel = SentinelChannel


#: The `broker_transport` setting that selects it.
TRANSPORT_PATH = f"{__name__}:Transport"
#: The same behind Sentinel.
SENTINEL_TRANSPORT_PATH = f"{__name__}:SentinelTransport"
