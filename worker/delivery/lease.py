"""The lease heartbeat of one delivery: extends the job's lease and its account slot, and catches missed cancels, in
one script call (WorkerJobStore.beat_call).

A lease that is no longer ours, or Redis out of reach for about a lease, stops the run at once: another worker may
recover the job any moment, and the fence guards only the writes, not the run itself.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from ..store.job_store import WorkerJobStore
from .ports import AccountsLike
from .state import Delivery

log = logging.getLogger("claudeq.engine")


class LeaseKeeper:
    """Keeps the leases of this worker's deliveries alive."""

    def __init__(
        self,
        store: WorkerJobStore,
        accounts: AccountsLike,
        *,
        worker_id: str,
        lease_ttl_s: float,
        heartbeat_s: float,
    ) -> None:
        self.store = store
        self.accounts = accounts
        self.worker_id = worker_id
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s

    async def keep(self, d: Delivery) -> None:
        """Heartbeat `d` until cancelled, or until the lease is lost (which stops its run). Each renewal moves
        `d.lease.until`, which `guard` watches without waiting on Redis."""
        ttl = self.lease_ttl_s
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                sent = time.monotonic()
                slot = d.hold.slot
                expiring = self.accounts.expiring_keys(slot) if slot is not None else []
                beat = await self.store.send(
                    self.store.beat_call(d.job_id, self.worker_id, d.lease.fence, ttl, expiring)
                )
                last_ok = time.monotonic()
                if not beat.ours:
                    log.warning("job %s: lease lost (expired or taken over); stopping the run", d.job_id)
                    d.lose()
                    return
                if slot is not None and not beat.held:
                    # Expired and dropped (a long pause): the run goes on, but the slot may have been handed out again.
                    log.warning("slot of job %s on account %s had expired before refresh", d.job_id, slot.account.name)
                d.lease.until = max(d.lease.until, sent + ttl)
                if d.why is None and beat.cancelled:
                    d.stop("cancel")
            except redis.RedisError as exc:
                if time.monotonic() - last_ok >= ttl - self.heartbeat_s:
                    # Cut off from Redis for about a lease: another worker may recover the job any moment. Stop
                    # our run now so the job never runs twice at once (the fence only guards the writes).
                    log.warning("job %s: no heartbeat for %.0f s (%s); stopping the run", d.job_id, ttl, exc)
                    d.lose()
                    return
                log.warning("job %s: heartbeat failed (%s); retrying", d.job_id, type(exc).__name__)

    def margin_s(self) -> float:
        """How long before the lease could expire the guard stops the run: time to SIGKILL the run's processes, with
        room for a loaded machine, while leaving the heartbeats of a healthy worker several tries (15 s TTL: 3 s)."""
        return max(0.5, self.lease_ttl_s / 5)

    async def guard(self, d: Delivery) -> None:
        """Stop the run before its lease or account slot can expire, on this process's monotonic clock alone: a
        heartbeat stuck in a Redis call (a frozen network) cannot renew them, and cannot be relied on to notice.
        The delivery is then `lost`: it writes nothing and frees nothing (another worker may hold the job and the
        slot by the time the lease is gone)."""
        margin = self.margin_s()
        while True:
            left = d.lease.until - margin - time.monotonic()
            if left <= 0:
                if d.why != "lost":
                    log.warning(
                        "job %s: lease not renewed in time (Redis unreachable?); stopping the run %.1f s before it "
                        "can expire",
                        d.job_id,
                        max(0.0, d.lease.until - time.monotonic()),
                    )
                    d.lose()
                return
            await asyncio.sleep(left)
