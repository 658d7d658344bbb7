"""Slots and messages of the engine: release an account slot (sending the waiter it is handed to), promote
deferred jobs, (re-)send a job's `claudeq.run` message. Shared by the deliveries and the background loops."""

from __future__ import annotations

import logging

from claudeq.errors import JobNotFound, RecordUnreadable
from claudeq.models import JobSpec

from ..store.job_store import WorkerJobStore
from .ports import AccountsLike, Sender
from .state import Delivery

log = logging.getLogger("claudeq.engine")


class Dispatch:
    """Frees slots and sends messages; failures are logged (the reconciler repairs what they leave)."""

    def __init__(self, store: WorkerJobStore, accounts: AccountsLike, send: Sender) -> None:
        self.store = store
        self.accounts = accounts
        self.send = send

    async def release(self, d: Delivery) -> None:
        """Give back the delivery's account slot (if it holds one) and wake the jobs that waited for it: the
        account's waiter the slot was handed to (already queued: sent) and its tenant's waiter (promoted, sent)."""
        slot, d.hold.slot = d.hold.slot, None
        if slot is None or d.lost:
            # A worker that lost the job must not touch it: the new owner may hold this very slot (members are job
            # ids); ours expires on its own when the heartbeat stops refreshing it.
            return
        try:
            waiters = await self.accounts.release(slot)
        except Exception:
            log.exception("job %s: releasing the account slot failed (it expires on its own)", d.job_id)
            return
        for job_id in waiters:
            if await self.promote_and_send(job_id, force=True):
                continue
            if await self.store.reads.status(job_id) == "queued":
                await self.send_admitted([job_id])  # admitted by the waiting line: queued, holding the slot

    async def send_admitted(self, job_ids: list[str]) -> None:
        """Send the messages of waiters the waiting line admitted (already `queued`, each holding a slot)."""
        for job_id in job_ids:
            log.info("job %s: admitted from the waiting line", job_id)
            await self.resend(job_id)

    async def promote_and_send(self, job_id: str, force: bool = False) -> bool:
        """Move a deferred job back to the queue (atomic, once across workers) and send its message."""
        if not await self.store.promote(job_id, None, force):
            return False
        await self.resend(job_id)
        return True

    async def resend(self, job_id: str) -> None:
        """Send a job's message again (spec from its record; the default queue when it cannot be read)."""
        spec: JobSpec | None
        try:
            spec = (await self.store.reads.get(job_id)).spec
        except JobNotFound:
            return
        except RecordUnreadable:
            spec = None
        await self.send_message(job_id, spec)

    async def send_message(self, job_id: str, spec: JobSpec | None) -> None:
        """Send the job's `claudeq.run` message; a failure is left to the reconciler."""
        try:
            await self.send(job_id, spec)
        except Exception:
            log.exception("job %s: sending its message failed; the reconciler re-sends it", job_id)
