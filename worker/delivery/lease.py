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

    async def beats(self, d: Delivery, started: float) -> None:
        """Heartbeat `d` (its first beat due now: the watch began at `started`) until cancelled, or until the lease is
        lost (which stops its run). Each renewal moves `d.lease.until`, which the guard (`Watch.check_guard`) watches
        without waiting on Redis."""
        ttl = self.lease_ttl_s
        last_ok = started
        while True:
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
            await asyncio.sleep(self.heartbeat_s)

    def watch(self, d: Delivery) -> Watch:
        """Keep `d`'s lease (`beats`, every `heartbeat_s`) and guard it (`Watch.check_guard`) until the returned watch
        is stopped, on the running loop, as timers: no task until the first heartbeat is due. Most runs of a busy
        fleet end before it, and two tasks per delivery, each cancelled at its end, were a measurable share of the
        engine's CPU per job (docs/scaling.md#the-engines-redis-client)."""
        watch = Watch(d, self, time.monotonic())
        loop = asyncio.get_running_loop()
        watch.beat_timer = loop.call_later(self.heartbeat_s, watch.start_beats)
        watch.check_guard()
        return watch

    def margin_s(self) -> float:
        """How long before the lease could expire the guard stops the run: time to SIGKILL the run's processes, with
        room for a loaded machine, while leaving the heartbeats of a healthy worker several tries (15 s TTL: 3 s)."""
        return max(0.5, self.lease_ttl_s / 5)


class Watch:
    """One delivery's lease, kept and guarded (`LeaseKeeper.watch`): the heartbeat's first wait and the guard's
    waits are timers; the heartbeat becomes a task when its first beat is due."""

    def __init__(self, d: Delivery, keeper: LeaseKeeper, started: float) -> None:
        self.d = d
        self.keeper = keeper
        self.started = started
        self.margin = keeper.margin_s()
        self.beat_timer: asyncio.TimerHandle | None = None
        self.beat_task: asyncio.Task[None] | None = None
        self.guard_timer: asyncio.TimerHandle | None = None

    def start_beats(self) -> None:
        """The first heartbeat is due: from now on a task beats."""
        self.beat_timer = None
        self.beat_task = asyncio.get_running_loop().create_task(self.keeper.beats(self.d, self.started))

    def check_guard(self) -> None:
        """Stop the run before its lease or account slot can expire, on this process's monotonic clock alone: a
        heartbeat stuck in a Redis call (a frozen network) cannot renew them, and cannot be relied on to notice.
        The delivery is then `lost`: it writes nothing and frees nothing (another worker may hold the job and the
        slot by the time the lease is gone). Else look again when it could be."""
        self.guard_timer = None
        d = self.d
        left = d.lease.until - self.margin - time.monotonic()
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
        self.guard_timer = asyncio.get_running_loop().call_later(left, self.check_guard)

    def stop(self) -> None:
        """Stop keeping and guarding (the delivery ended)."""
        for timer in (self.beat_timer, self.guard_timer):
            if timer is not None:
                timer.cancel()
        if self.beat_task is not None:
            self.beat_task.cancel()
