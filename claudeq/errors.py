"""The one error tree of claudeq. Each error names what happened and carries the facts as fields."""

from __future__ import annotations


class ClaudeqError(Exception):
    """Root of every error claudeq raises on purpose."""


class ConfigError(ClaudeqError):
    """Configuration is invalid; the message says which setting and how to fix it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class JobSpecError(ClaudeqError):
    """A job spec was refused at submit; nothing was written or enqueued."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in errors))

    @property
    def field(self) -> str:
        """The first offending field."""
        return self.errors[0][0] if self.errors else ""


class BatchSpecError(JobSpecError):
    """Specs of a batch were refused at submit; nothing of the batch was written or enqueued.

    `items` holds (index in the batch, field, reason) for every problem of every refused spec."""

    def __init__(self, items: list[tuple[int, str, str]]) -> None:
        self.items = items
        super().__init__([(f"[{index}].{field}", reason) for index, field, reason in items])

    @property
    def indexes(self) -> list[int]:
        """The refused specs' indexes, in order, each once."""
        return list(dict.fromkeys(index for index, _, _ in self.items))


class JobNotFound(ClaudeqError):
    """No job with this id exists (never did, or its retention expired)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r}")


class ApprovalRefused(ClaudeqError):
    """A decision on a job's approval request was refused: `why` is `none` (nothing to decide), `decided` (answered
    before: `decided_by` says by whom), `other` (not the job's latest request), `tenant` (another tenant's job) or
    `stale` (the run that asked is gone)."""

    def __init__(self, job_id: str, why: str, message: str, decided_by: str | None = None) -> None:
        self.job_id = job_id
        self.why = why
        self.decided_by = decided_by
        super().__init__(message)


class ArtifactNotFound(JobNotFound):
    """The job has no artifact of this name (it never wrote one, or its retention expired)."""

    def __init__(self, job_id: str, name: str) -> None:
        super().__init__(job_id)
        self.name = name
        self.args = (f"job {job_id!r} has no artifact {name!r}",)

    def __str__(self) -> str:
        return str(self.args[0])


class RecordUnreadable(ClaudeqError):
    """A stored record could not be parsed (written by another version, or damaged)."""

    def __init__(self, job_id: str, detail: str) -> None:
        self.job_id = job_id
        self.detail = detail
        super().__init__(f"job {job_id!r}: record cannot be read: {detail}")


class JobTimeout(ClaudeqError):
    """Waiting for a job ran out of time; the job itself goes on."""

    def __init__(self, job_id: str, timeout_s: float) -> None:
        self.job_id = job_id
        self.timeout_s = timeout_s
        super().__init__(f"job {job_id!r} not finished after {timeout_s:g} s")


class NotReplicated(ClaudeqError):
    """Redis did not confirm, within the wait, that enough replicas hold a write (`CLAUDEQ_REDIS_WAIT_REPLICAS`).

    The write is on the primary; it is lost only if the primary dies before a replica gets it. A submit that raises
    this may or may not have made its jobs: submit again with the same idempotency key (docs/failover.md)."""

    def __init__(self, acked: int, wanted: int, timeout_ms: int, job_ids: tuple[str, ...] = ()) -> None:
        self.acked = acked
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        self.job_ids = job_ids
        jobs = f" for job(s) {', '.join(job_ids[:5])}{' …' if len(job_ids) > 5 else ''}" if job_ids else ""
        super().__init__(f"{acked} of {wanted} replica(s) confirmed the write{jobs} within {timeout_ms} ms")


class UnknownAccount(ClaudeqError):
    """An account name that is not in the pool."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no account named {name!r}")


class PolicyViolation(ClaudeqError):
    """A job asks for something the worker policy forbids (a tool, a cwd, a permission mode, an unknown MCP tool)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")
