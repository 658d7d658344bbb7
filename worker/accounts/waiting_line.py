"""The waiting line for account slots: which waiting job gets the next free slot.

See docs/architecture.md#the-waiting-line.

Jobs that found no free slot wait, deferred, in the line of every account that may run them (the sorted set
`acct:{name}:waiters`), scored by `rank`: lower goes first. A slot that frees is handed to the best waiter still
deferred (`admit` in claudeq/lua/lib/admit.lua), and a job that arrives while better-ranked jobs wait for that
account yields to them (`ACQUIRE` answers -4). Without a tenants file the rank is

    rank = priority * PRIORITY_SPAN + creation time (epoch seconds)

so a priority-0 job never waits behind a priority-9 one, and within one priority the oldest job goes first,
whichever worker saw it. With a tenants file it is the job's virtual finish tag alone (weighted fair queueing over
tenants): the head of a line says whose turn a free slot is, and that tenant's best job by `tenant_rank` (priority,
then creation time) takes it (`within` in claudeq/lua/lib/admit.lua), so priority orders within a tenant and a tenant's
low-priority flood never delays another tenant's jobs. Every script only compares scores.
"""

from __future__ import annotations

from claudeq.models import JobRecord

#: Width of one priority step in the score: 1e10 s (~317 years) of age keys; a double still resolves 10 µs at 9e10.
PRIORITY_SPAN = 1e10


def rank(record: JobRecord, fair_key: float | None = None) -> float:
    """The job's place in every account's waiting line (lower goes first): priority, then creation time — or, with
    tenants configured, its virtual finish tag alone (`fair_key`: weighted fair queueing over tenants; priority
    orders within a tenant, see `tenant_rank` and docs/architecture.md#fair-share)."""
    if fair_key is not None:
        return min(max(fair_key, 0.0), PRIORITY_SPAN - 1.0)
    return record.spec.priority * PRIORITY_SPAN + min(max(record.created_at.timestamp(), 0.0), PRIORITY_SPAN - 1.0)


def tenant_rank(priority: int, created_s: float) -> float:
    """A job's place among its own tenant's waiting jobs (its tenant's line and waiters): priority, then creation
    time (epoch s). When a slot goes to a tenant (its turn, by tag in the accounts' lines), the tenant's best job by
    this place takes it."""
    return priority * PRIORITY_SPAN + min(max(created_s, 0.0), PRIORITY_SPAN - 1.0)
