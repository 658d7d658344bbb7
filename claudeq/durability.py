"""How sure a write is to survive a failover: Redis `WAIT` for `CLAUDEQ_REDIS_WAIT_REPLICAS` (docs/failover.md).

Replication is asynchronous: the primary acknowledges a write before any replica has it, so a primary that dies
right after may take it along. `WAIT n timeout` blocks until `n` replicas acknowledged every write *of the
connection it runs on*. A submit's MULTI/EXEC and a reader's connection are not that connection (redis-py takes
one from its pool per call), so the mark is written first, on the same connection as the `WAIT`, in one pipeline:
the stream reaches a replica in order, so a replica that acknowledged the mark holds everything written before
it was sent — the submit that returned just before, or the terminal write a reader just read.
"""

from __future__ import annotations

import time

import redis

from claudeq.config.settings import Settings
from claudeq.errors import NotReplicated
from claudeq.keys import Keys

#: How long the mark lives (s): one small key, whoever wrote it last.
MARK_TTL_S = 60


def replicated(client: redis.Redis, settings: Settings, job_ids: tuple[str, ...] = ()) -> int:
    """Block until `redis_wait_replicas` replicas hold every write made before this call; -> how many did.
    Raises NotReplicated when fewer confirm within `redis_wait_timeout_ms`. Free when the setting is 0."""
    wanted = settings.redis_wait_replicas
    if wanted <= 0:
        return 0
    pipe = client.pipeline(transaction=False)  # one connection: the WAIT covers the mark
    pipe.set(Keys(settings.key_prefix).replication_mark, repr(time.time()), ex=MARK_TTL_S)
    pipe.execute_command("WAIT", wanted, settings.redis_wait_timeout_ms)  # type: ignore[no-untyped-call]
    acked = int(pipe.execute()[1])
    if acked < wanted:
        raise NotReplicated(acked, wanted, settings.redis_wait_timeout_ms, job_ids)
    return acked
