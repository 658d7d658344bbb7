"""Connections to claudeq's Redis: `redis_url`'s host, or the primary the sentinels name (docs/failover.md).

Everything that talks to Redis — the producer's client, the worker's stores and its loop client, the exporter,
`claudeq top` and the other commands, the broker (its URL: config/celery.py) — gets its connection here, so one setting,
`CLAUDEQ_REDIS_SENTINELS`, moves all of them behind Sentinel. The db, the password and TLS still come from
`redis_url`; its host and port are then unused.

Behind Sentinel a connection asks the sentinels for the primary's address each time it connects, so after a
failover every new connection reaches the new primary. One still open to the old primary meets `READONLY` once
that host is a replica, or a dead socket while it is down: redis-py's Sentinel-managed connections drop
themselves on either and the call raises `ConnectionError`, which claudeq's callers treat as the Redis errors
they already retry (docs/failover.md#what-a-failover-looks-like). Script SHAs are loaded again on `NOSCRIPT`
(claudeq/script_calls.py), as after any restart.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio import sentinel as aio_sentinel
from redis.connection import SSLConnection, parse_url
from redis.sentinel import Sentinel

from claudeq.config.settings import Settings


def _primary_kwargs(settings: Settings) -> dict[str, Any]:
    """The connection settings of `redis_url` that hold behind Sentinel: db, username, password, TLS."""
    kwargs: dict[str, Any] = parse_url(settings.redis_url)  # type: ignore[no-untyped-call]
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    kwargs.pop("path", None)
    connection_class = kwargs.pop("connection_class", None)
    if connection_class is not None and issubclass(connection_class, SSLConnection):
        kwargs["ssl"] = True
    return kwargs


def uses_sentinel(settings: Settings) -> bool:
    """Whether the primary is found through sentinels."""
    return bool(settings.sentinel_addresses)


def sync_client(settings: Settings, **options: Any) -> redis.Redis:
    """A client of the primary (`options`: socket timeouts, `max_connections`, … as for `redis.Redis`)."""
    if not uses_sentinel(settings):
        return redis.Redis.from_url(settings.redis_url, **options)
    sentinel = Sentinel(settings.sentinel_addresses, sentinel_kwargs=_sentinel_kwargs(options))
    client: redis.Redis = sentinel.master_for(settings.redis_master_name, **{**_primary_kwargs(settings), **options})
    return client


class _BlockingSentinelPool(aio_sentinel.SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel's pool (connections to the current primary) that waits for a free connection past its size instead
    of failing, as the worker's loop client needs (worker/app.py)."""


def async_client(settings: Settings, *, blocking: bool = False, **options: Any) -> aioredis.Redis:
    """An asyncio client of the primary; `blocking`: a pool that waits for a connection past `max_connections`
    (`timeout` s) rather than refusing the call."""
    if not uses_sentinel(settings):
        if blocking:
            return aioredis.Redis(
                connection_pool=aioredis.BlockingConnectionPool.from_url(settings.redis_url, **options)
            )
        return aioredis.Redis.from_url(settings.redis_url, **options)
    sentinel = aio_sentinel.Sentinel(settings.sentinel_addresses, sentinel_kwargs=_sentinel_kwargs(options))
    pool_class = _BlockingSentinelPool if blocking else aio_sentinel.SentinelConnectionPool
    client: aioredis.Redis = sentinel.master_for(
        settings.redis_master_name, connection_pool_class=pool_class, **{**_primary_kwargs(settings), **options}
    )
    return client


def _sentinel_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """How the sentinels themselves are asked: the same socket timeouts as the primary's connections."""
    return {k: options[k] for k in ("socket_timeout", "socket_connect_timeout") if k in options}
