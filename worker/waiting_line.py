"""The waiting line for account slots: which waiting job gets the next free slot.

See docs/architecture.md#the-waiting-line.

Jobs that found no free slot wait, deferred, in the line of every account that may run them (the sorted set
`acct:{name}:waiters`), scored by `rank`: lower goes first. A slot that frees is handed to the best waiter still
deferred (`admit` in claudeq/account_scripts.py), and a job that arrives while better-ranked jobs wait for that
account yields to them (`ACQUIRE` answers -4). The rank is the one ordering key of the fleet:

    rank = priority * PRIORITY_SPAN + age key

with the job's `spec.priority` (0 first .. 9 last) and, as the age key, its creation time (epoch seconds): a
priority-0 job never waits behind a priority-9 one, and within one priority the oldest job goes first, whichever
worker saw it. Another ordering key plugs in by changing `rank` alone (every script only compares scores): e.g. a
tenant's virtual time (weighted fair share) in place of, or added to, the creation time, as long as the age key
stays within [0, PRIORITY_SPAN) so priorities never mix.
"""

from __future__ import annotations

from claudeq.models import JobRecord

#: Width of one priority step in the score: 1e10 s (~317 years) of age keys; a double still resolves 10 µs at 9e10.
PRIORITY_SPAN = 1e10


def rank(record: JobRecord, fair_key: float | None = None) -> float:
    """The job's place in every account's waiting line (lower goes first): priority, then creation time — or, with
    tenants configured, its virtual finish tag (`fair_key`: weighted fair queueing over tenants, see
    docs/architecture.md#fair-share) in place of the creation time."""
    key = record.created_at.timestamp() if fair_key is None else fair_key
    return record.spec.priority * PRIORITY_SPAN + min(max(key, 0.0), PRIORITY_SPAN - 1.0)
