"""The handler's side of concurrency keys: take the job's key before an attempt (or wait for it, deferred), hold it
while the attempt runs, let go of it after and wake the best waiters (docs/jobs.md#concurrency-keys)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from claudeq.models import ACTIVE, JobSpec

from ...config.settings import Settings
from ..store.concurrency_keys import ConcurrencyKeys, InLine
from .dispatch import Dispatch
from .state import Delivery

log = logging.getLogger("claudeq.engine")
#: How many times a release looks past waiters that no longer wait before it leaves the rest to their recheck.
MAX_WAKE_ROUNDS = 10


class KeyGate:
    """One per delivery handler: the holds of its deliveries, each renewed while its attempt runs."""

    def __init__(self, settings: Settings, keys: ConcurrencyKeys, dispatch: Dispatch) -> None:
        self.settings = settings
        self.keys = keys
        self.dispatch = dispatch
        self._renewals: dict[str, asyncio.Task[None]] = {}

    @property
    def hold_s(self) -> float:
        """How long a hold lasts unless renewed: a worker that died lets go of its keys after this."""
        return 3 * self.settings.lease_ttl_s

    async def enter(self, d: Delivery, spec: JobSpec, rank: float) -> str | None:
        """Take the job's key for this attempt (None), or say why it waits: it is then in the key's line."""
        got = await self.keys.take(d.job_id, spec, rank, self.hold_s)
        if isinstance(got, InLine):
            for other in got.ahead:
                await self.wake(other, spec)
            return (
                f"waiting for concurrency key {spec.concurrency_key!r}: {got.held} of {spec.concurrency_limit} "
                "run(s) hold it"
            )
        self._renewals[d.job_id] = asyncio.ensure_future(self._renew(d, spec, rank))
        return None

    async def recheck(self, d: Delivery, spec: JobSpec, rank: float) -> bool:
        """Whether the key would be taken now (its holders ended while the job was being deferred)."""
        return not isinstance(await self.keys.take(d.job_id, spec, rank, self.hold_s, peek=True), InLine)

    async def leave(self, d: Delivery, spec: JobSpec) -> None:
        """Let go of the key after the attempt and send the waiters that now have room. A delivery that lost the
        job lets its hold expire: the job's new owner may hold the key under the same id."""
        renewal = self._renewals.pop(d.job_id, None)
        if renewal is not None:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
        if d.lost:
            return
        try:
            for _ in range(MAX_WAKE_ROUNDS):  # a waiter that no longer waits gives its turn to the next one
                woken = [await self.wake(waiter, spec) for waiter in await self.keys.release(d.job_id, spec)]
                if all(woken):
                    break
        except Exception:
            log.exception("job %s: letting go of concurrency key %r failed", d.job_id, spec.concurrency_key)

    async def wake(self, job_id: str, spec: JobSpec) -> bool:
        """Send a waiter of the key (once across workers); False when it no longer waits (it ended, or was cancelled
        while it waited): it leaves the line."""
        if await self.dispatch.promote_and_send(job_id, force=True):
            return True
        status = await self.dispatch.store.reads.status(job_id)
        if status in ACTIVE:
            return True  # on its way (queued), or already running
        await self.keys.drop(job_id, spec)
        return False

    async def _renew(self, d: Delivery, spec: JobSpec, rank: float) -> None:
        # No attempt outlives its deadline: past it (and a hold's length) the hold is left to expire, whatever
        # kept `leave` from being called.
        until = time.monotonic() + (spec.deadline_s or self.settings.deadline_s) + self.hold_s
        while time.monotonic() < until:
            await asyncio.sleep(self.settings.lease_ttl_s)
            try:
                await self.keys.take(d.job_id, spec, rank, self.hold_s)
            except Exception:
                log.exception("job %s: renewing concurrency key %r failed", d.job_id, spec.concurrency_key)
