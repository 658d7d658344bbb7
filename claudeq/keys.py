"""Every Redis key claudeq uses, in one place; the table is in docs/architecture.md#redis-keys."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from claudeq.config.tenants import DEFAULT_TENANT


def text(value: object) -> str:
    """A Redis reply (bytes or str) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Keys:
    """Key shapes under one prefix (default `claudeq:`)."""

    prefix: str = "claudeq:"

    def job(self, job_id: str) -> str:
        """Hash: spec, status, attempts, account, worker, session id, timestamps, result, error, fence."""
        return f"{self.prefix}job:{job_id}"

    def artifacts(self, job_id: str) -> str:
        """Hash: the job's artifacts, name -> zlib-compressed bytes (docs/jobs.md#artifacts)."""
        return f"{self.prefix}job:{job_id}:artifacts"

    def events(self, job_id: str) -> str:
        """Stream: the job's progress events, trimmed with MAXLEN ~."""
        return f"{self.prefix}job:{job_id}:events"

    @property
    def cancel_channel(self) -> str:
        """Pub/sub channel: a job id published here wakes the worker running it."""
        return f"{self.prefix}cancel"

    @property
    def follow_channel(self) -> str:
        """Pub/sub channel: a job id published here says someone follows its events (its run stores them at once)."""
        return f"{self.prefix}follow"

    @property
    def jobs(self) -> str:
        """Sorted set: job ids by creation time (ms)."""
        return f"{self.prefix}jobs"

    @property
    def waiting(self) -> str:
        """Sorted set: job id -> creation time (epoch s) of the jobs waiting for their dependencies (`depends_on`):
        no broker message, no slot; a dependency's end makes one due (`deferred`) when it may run."""
        return f"{self.prefix}waiting"

    def dependents(self, job_id: str) -> str:
        """Set: the waiting jobs that depend on `job_id`; its end releases them and deletes it. (The job's record
        has `dependents` = 1 while it exists, read with what the end reads anyway.)"""
        return f"{self.prefix}job:{job_id}:dependents"

    @property
    def deferred(self) -> str:
        """Sorted set: deferred job id -> ready time (epoch s)."""
        return f"{self.prefix}deferred"

    @property
    def queued(self) -> str:
        """Sorted set: queued job id -> time its message was last sent (epoch s), for the reconciler."""
        return f"{self.prefix}queued"

    def finished_counts(self, status: str) -> str:
        """Hash: hour (epoch s // 3600) by whose end a finished job's retention is over -> jobs of `status`."""
        return f"{self.finished_counts_prefix}{status}"

    @property
    def finished_counts_prefix(self) -> str:
        """`finished_counts(status)` without the status (the scripts append the status they write)."""
        return f"{self.prefix}counts:"

    def loop_failures(self, loop: str, job_id: str) -> str:
        """String: how many passes of a background loop (`promoter`, `reconciler`) could not handle the job lately (an
        hour's expiry); at `loop_item_max_failures` the loop fails the job (docs/architecture.md#background-loops)."""
        return f"{self.prefix}loop-failures:{loop}:{job_id}"

    @property
    def running(self) -> str:
        """Sorted set: running job id -> when its run's lease expires (epoch s; a few heartbeats after the last one).
        The reconciler recovers the jobs whose expiry has passed."""
        return f"{self.prefix}running"

    @property
    def reconciler_turn(self) -> str:
        """String: the worker whose reconciler pass this is (expires after one loop interval): one pass per
        interval across the fleet, not one per worker."""
        return f"{self.prefix}reconciler-turn"

    def scope(self, tenant: str) -> str:
        """The prefix of a tenant's own names (docs/architecture.md#redis-keys): what a producer names (idempotency
        keys, conversations) is looked up in its tenant's namespace only. The default tenant's keys are those of a
        fleet without tenants (no part added); another tenant's are under `tenant:{name}:` (a tenant name has no
        `:`, so no name of one tenant can reach another's keys)."""
        return self.prefix if tenant == DEFAULT_TENANT else f"{self.prefix}tenant:{tenant}:"

    def idem(self, key: str, tenant: str = DEFAULT_TENANT) -> str:
        """String: the job id created for one of `tenant`'s idempotency keys (SET NX)."""
        return f"{self.scope(tenant)}idem:{key}"

    def submit_rate(self, tenant: str, minute: int) -> str:
        """String: how many jobs configured tenant `tenant` submitted through the HTTP API in epoch minute `minute`
        (INCRBY; expires after two minutes)."""
        return f"{self.scope(tenant)}submit-rate:{minute}"

    def concurrency_key(self, key: str, tenant: str = DEFAULT_TENANT) -> str:
        """Sorted set: the jobs of `tenant` holding concurrency key `key` (job -> hold expiry, epoch s); the key by
        its digest (any string may be one). `…:waiters` beside it: the jobs waiting for it (job -> rank)."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return f"{self.scope(tenant)}ckey:{digest}"

    def conversation(self, name: str, tenant: str = DEFAULT_TENANT) -> str:
        """String: the latest session id of `tenant`'s conversation `name` (every conversation key is in its
        tenant's scope: another tenant's conversation of the same name is another conversation)."""
        return f"{self.scope(tenant)}conv:{name}"

    def account(self, name: str) -> str:
        """Hash: account state, reason, cooldown, last rate-limit info per window, counters."""
        return f"{self.prefix}acct:{name}"

    def account_slots(self, name: str) -> str:
        """Sorted set: job id -> slot lease expiry (epoch s); the per-account semaphore."""
        return f"{self.prefix}acct:{name}:slots"

    def account_prefixes(self, name: str) -> str:
        """Sorted set: digest of a prompt prefix the pass-through sent on the account -> when its cache entry expires
        (epoch s; the TTL its breakpoint asked for). Bounded; no content (docs/architecture.md#cache-affinity)."""
        return f"{self.prefix}acct:{name}:prefixes"

    def prefix_of(self, key: str) -> str:
        """String: the digest of the system prefix the last run with this prefix key sent (expires with it)."""
        return f"{self.prefix}prefix:{key}"

    def account_waiters(self, name: str, family: str = "-") -> str:
        """Sorted set: the account's waiting line for jobs of one model family (`-`: no particular family): deferred
        job id -> rank (lower first); a released slot goes to the best-ranked one."""
        if family == "-":
            return f"{self.prefix}acct:{name}:waiters"
        return f"{self.prefix}acct:{name}:waiters:{family}"

    def account_reserved(self, name: str) -> str:
        """Hash: job id -> dollars reserved by the account's run in flight (its `max_budget_usd`) while capped."""
        return f"{self.prefix}acct:{name}:reserved"

    def account_history(self, name: str, hour: int) -> str:
        """Hash: `rejected:<epoch minute>`, `warnings:<epoch minute>` (rate-limit signals counted in that minute),
        `slots:<epoch minute>` (slots in use, sampled once a minute), for the minutes of one epoch hour."""
        return f"{self.prefix}acct:{name}:hist:{hour}"

    def account_spend(self, name: str) -> str:
        """Hash: `h:<epoch hour>` / `d:<epoch day>` -> dollars the account's runs spent in that calendar window."""
        return f"{self.prefix}acct:{name}:spend"

    def tenant_runs(self, name: str) -> str:
        """Sorted set: job id -> slot expiry (epoch s) of the tenant's runs in flight, fleet-wide."""
        return f"{self.prefix}tenant:{name}:runs"

    def tenant_reserved(self, name: str) -> str:
        """Hash: job id -> dollars reserved by the tenant's run in flight while capped."""
        return f"{self.prefix}tenant:{name}:reserved"

    def tenant_waiters(self, name: str) -> str:
        """Sorted set: deferred job id -> its place while waiting for one of the tenant's runs to end."""
        return f"{self.prefix}tenant:{name}:waiters"

    def tenant_line(self, name: str) -> str:
        """Sorted set: the tenant's jobs waiting in the accounts' lines -> priority x 1e10 + virtual finish tag: which
        of its jobs takes the tenant's turn when a slot goes to it (priority within a tenant)."""
        return f"{self.prefix}tenant:{name}:line"

    def tenant_spend(self, name: str) -> str:
        """Hash: `h:<epoch hour>` / `d:<epoch day>` -> dollars the tenant's runs spent in that calendar window."""
        return f"{self.prefix}tenant:{name}:spend"

    def tenant_jobs(self, name: str) -> str:
        """Sorted set: the tenant's active (not finished) job ids -> creation time (epoch s)."""
        return f"{self.prefix}tenant:{name}:jobs"

    def tenant_index(self, name: str) -> str:
        """Sorted set: the tenant's jobs, finished or not, while retained -> creation time (ms): the tenant's own
        `jobs`, which a listing of its jobs reads (exact at any fleet size). Kept in a fleet that uses tenants (the
        jobs' `indexed`); a fleet without tenants keeps no per-tenant index and lists from `jobs`."""
        return f"{self.prefix}tenant:{name}:index"

    @property
    def tenants_done(self) -> str:
        """Hash: tenant name -> when (epoch s) its last job finished; kept only with `reserve_share`, whose idle grace
        (`share_idle_s`) counts a tenant active for a while after its last job (docs/architecture.md#fair-share)."""
        return f"{self.prefix}tenants-done"

    @property
    def tenants_balance(self) -> str:
        """Hash: tenant name -> "balance|updated" (slot-seconds owed, + , or owing, -, and when it was last moved):
        the catch-up of reserved fair share, kept only while two or more tenants are active; the field `|repay_s`
        holds the run length (s) the last worker to move them repays a slot of catch-up per
        (docs/architecture.md#fair-share)."""
        return f"{self.prefix}tenants-balance"

    @property
    def tenants_in_use(self) -> str:
        """String: set by every worker started with a tenants file. A producer without the file indexes its jobs
        under `default` (`tenant_jobs`) only once it is set: a fleet without tenants keeps no per-tenant index."""
        return f"{self.prefix}tenants-in-use"

    @property
    def replication_mark(self) -> str:
        """String, expiring after a minute: written just before a `WAIT` on the same connection, so the wait covers
        every write this process made before it (claudeq/durability.py)."""
        return f"{self.prefix}replication-mark"

    @property
    def fair_share(self) -> str:
        """Hash: `v` the system virtual time, `t:<tenant>` each tenant's last virtual finish tag (fair share)."""
        return f"{self.prefix}fair"

    def worker(self, worker_id: str) -> str:
        """Hash: heartbeat, host, pid, runs in flight; expires a few heartbeats after the last one."""
        return f"{self.prefix}worker:{worker_id}"

    @property
    def outbox(self) -> str:
        """Sorted set: job id -> when its end notifications (webhook, link) are next due (epoch s); a notifier that
        takes one moves it a lease ahead, and takes it out when every notification is delivered or dead."""
        return f"{self.prefix}outbox"

    @property
    def outbox_dead(self) -> str:
        """Sorted set: job id -> when (epoch s) a notification of it was given up on (`claudeq webhooks retry`)."""
        return f"{self.prefix}outbox-dead"

    @property
    def workers(self) -> str:
        """Sorted set: worker id -> last heartbeat (epoch s)."""
        return f"{self.prefix}workers"

    def session(self, *parts: str) -> str:
        """Transcripts mirrored through the SDK's SessionStore."""
        return f"{self.prefix}session:" + ":".join(parts)

    # Sessions (RedisSessionStore, claudeq/transcripts/_store.py). Parts are escaped with `key_part` so a `:` inside a
    # project key, session id or subpath can never make two different SessionKeys share a Redis key.

    def session_entries(self, project_key: str, session_id: str, subpath: str | None = None) -> str:
        """List: a session's mirrored transcript entries (JSON), the main transcript or one subpath (subagent)."""
        tail = "main" if not subpath else f"sub:{key_part(subpath)}"
        return self.session(key_part(project_key), key_part(session_id), tail)

    def session_uuids(self, project_key: str, session_id: str, subpath: str | None = None) -> str:
        """Set: entry uuids stored in `session_entries(...)` before `session_ids`, or with the codec `none`."""
        return self.session_entries(project_key, session_id, subpath) + ":uuids"

    def session_ids(self, project_key: str, session_id: str, subpath: str | None = None) -> str:
        """String: entry uuids already stored in `session_entries(...)`, each as JSON text and a newline (append
        dedup; replaces the set `session_uuids`, still read for sessions written before)."""
        return self.session_entries(project_key, session_id, subpath) + ":ids"

    def session_subkeys(self, project_key: str, session_id: str) -> str:
        """Set: the subpaths (subagent transcripts) stored under a session."""
        return self.session(key_part(project_key), key_part(session_id), "subkeys")

    def session_summary(self, project_key: str, session_id: str) -> str:
        """String: the session's SessionSummaryEntry (JSON), folded with the SDK's fold_session_summary."""
        return self.session(key_part(project_key), key_part(session_id), "summary")

    def session_index(self, project_key: str) -> str:
        """Sorted set: session id -> last append (epoch ms) of the project's main transcripts."""
        return f"{self.prefix}sessions:{key_part(project_key)}"

    def session_projects(self, session_id: str) -> str:
        """Set: the project keys a session id has a main transcript under (find a session by id alone)."""
        return f"{self.prefix}session-projects:{key_part(session_id)}"

    @property
    def schedules(self) -> str:
        """Hash: every schedule, `{tenant}/{name}` -> its JSON (claudeq/schedules.py)."""
        return f"{self.prefix}schedules"

    @property
    def schedules_due(self) -> str:
        """Sorted set: `{tenant}/{name}` -> the schedule's next tick (epoch s); paused schedules are not in it."""
        return f"{self.prefix}schedules-due"

    def schedule_stats(self, member: str) -> str:
        """Hash: what a schedule fired (`fired`, `missed`, `last_job_id`)."""
        return f"{self.prefix}schedule-stats:{key_part(member)}"

    @property
    def archive_due(self) -> str:
        """Sorted set: what moves to the transcript archive (`s:<session id>`, `j:<job id>`) -> when (epoch s)."""
        return f"{self.prefix}archive-due"

    def session_tenant(self, session_id: str) -> str:
        """String: the tenant whose runs work in the session, for every tenant but `default` (no key: the default
        tenant's, or a session older than ownership); only its own tenant's jobs may resume it."""
        return f"{self.prefix}session-tenant:{key_part(session_id)}"

    def conversation_turns(self, name: str, tenant: str = DEFAULT_TENANT) -> str:
        """List: the conversation's turns (JSON: job id, session id, forked/restarted, timestamps), oldest first."""
        return f"{self.scope(tenant)}conv-turns:{name}"

    def conversation_lock(self, name: str, tenant: str = DEFAULT_TENANT) -> str:
        """String: id of the job running the conversation's current turn (a holder no longer active is stale)."""
        return f"{self.scope(tenant)}conv-lock:{name}"

    def conversation_waiters(self, name: str, tenant: str = DEFAULT_TENANT) -> str:
        """Sorted set: job id -> its turn number (submit order) while the turn is active and not running."""
        return f"{self.scope(tenant)}conv-waiters:{name}"

    def conversation_seq(self, name: str, tenant: str = DEFAULT_TENANT) -> str:
        """String: the last turn number handed out in the conversation (INCR at submit)."""
        return f"{self.scope(tenant)}conv-seq:{name}"

    def conversations(self, tenant: str = DEFAULT_TENANT) -> str:
        """Sorted set: `tenant`'s conversation names -> last turn time (epoch s)."""
        return f"{self.scope(tenant)}convs"


def key_part(part: str) -> str:
    """Escape `%` and `:` in a key component so joined parts stay unambiguous."""
    return part.replace("%", "%25").replace(":", "%3A")
