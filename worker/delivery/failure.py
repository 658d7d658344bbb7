"""The failure policy: a pure function from what one attempt observed to a decision.

The table it implements, row by row, is docs/architecture.md#failure-policy.

No Redis, no clock of its own, no SDK: the engine feeds it a `RunOutcome` and carries the `Decision` out.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from claudeq.models import ErrorKind, JobError, Outcome
from claudeq.permissions import MAX_ARG_STRLEN

from ...config.account_pool import AccountConfig
from ..run.outcome import RunOutcome

#: What the engine does next.
#: succeed/fail/cancel: finish the job; retry: transient, back off (tenacity) then run again;
#: reroute: run again at once on another account (or defer when none is free); requeue: back to the queue (shutdown).
Action = Literal["succeed", "fail", "cancel", "retry", "reroute", "requeue"]

#: Result subtypes that mean the job itself ended badly: retrying cannot help.
JOB_FAILURE_SUBTYPES: frozenset[str] = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"}
)

#: HTTP statuses that say the request itself is wrong (retrying the same request cannot help).
_PERMANENT_STATUSES: frozenset[int] = frozenset({400, 403, 404, 413, 422})


@dataclass(frozen=True)
class OutputCheck:
    """What the bounded schema check (worker/run/output_check.py, its own process) said of a structured output."""

    problem: str | None = None  # why the output does not match the schema (None: it matches)
    timed_out: str | None = None  # the check was killed at its deadline (how long it had)


@dataclass(frozen=True)
class OutputReview:
    """What was found of a run's output besides its outcome: a success with a `schema` needs the `check` of its
    structured output; `unstorable`: why the output cannot be stored (worker/run/output_check.py `unstorable`): the
    job fails, kind `output`, whatever else the attempt saw but a cancel (the run was paid for; running it again would
    pay twice)."""

    schema: dict[str, Any] | None = None  # the structured output's schema (None: the job asks for none)
    check: OutputCheck | None = None
    unstorable: str | None = None


@dataclass(frozen=True)
class Decision:
    """What to do after one attempt."""

    outcome: Outcome  # the attempt's recorded outcome
    action: Action
    detail: str  # human text for the attempt record and logs (never a secret)
    error: JobError | None = None  # set when action is fail or cancel
    cool_until: datetime | None = None  # cool the account (fleet-wide) until then
    disable_reason: str | None = None  # disable the account with this reason
    retry_reason: str | None = None  # label for retries_total{reason} (transient | timeout)


def decide(
    outcome: RunOutcome,
    account: AccountConfig,
    attempts_so_far: int,
    max_attempts: int,
    *,
    now: datetime,
    rate_limit_cooldown_s: float,
    output: OutputReview = OutputReview(),
) -> Decision:
    """Classify one attempt. `attempts_so_far` counts the earlier counted attempts (this one excluded). `output`:
    what was found of the run's output (`OutputReview`; validation never runs here)."""
    if outcome.stopped_by == "cancel":
        return Decision("cancelled", "cancel", "cancelled", error=JobError(kind="cancelled", message="cancelled"))
    if output.unstorable is not None:
        detail = f"the run's output cannot be stored: {output.unstorable}; not retried"
        return Decision("failed", "fail", detail, error=JobError(kind="output", message=detail))
    if outcome.stopped_by == "shutdown":
        return Decision("requeued", "requeue", "worker shutting down; job re-enqueued")
    if outcome.got_result and not outcome.is_error:
        return _success(outcome, output.schema, output.check)
    if outcome.start_errno is not None:
        return _cannot_start(outcome, outcome.start_errno)

    rate_limited = _rate_limit(outcome, account, now, rate_limit_cooldown_s)
    if rate_limited is not None:
        return rate_limited

    remaining = attempts_so_far + 1 < max_attempts
    if _auth_failed(outcome):
        reason = f"authentication failed on account {account.name!r}: {_short(outcome)}"
        if remaining:
            return Decision("auth_failed", "reroute", reason, disable_reason=reason)
        error = JobError(kind="account", message=f"{reason}; gave up after {max_attempts} attempts")
        return Decision("auth_failed", "fail", reason, error=error, disable_reason=reason)

    if outcome.subtype in JOB_FAILURE_SUBTYPES:
        detail = f"{outcome.subtype}: {_short(outcome)}"
        return Decision("failed", "fail", detail, error=JobError(kind="job", message=detail))
    if outcome.api_error_status in _PERMANENT_STATUSES:
        detail = f"API refused the request ({outcome.api_error_status}): {_short(outcome)}"
        return Decision("failed", "fail", detail, error=JobError(kind="job", message=detail))

    if outcome.stopped_by in ("first_byte", "idle", "deadline"):
        detail = f"{outcome.stopped_by} timeout: the worker stopped the run"
        return _retry_or_fail("timeout", detail, remaining, max_attempts)
    return _retry_or_fail("transient_error", _transient_detail(outcome), remaining, max_attempts)


def _success(outcome: RunOutcome, output_schema: dict[str, Any] | None, check: OutputCheck | None) -> Decision:
    if output_schema is None:
        return Decision("success", "succeed", "success")
    data = outcome.result.structured_output
    if data is None:
        detail = "the run ended without the structured output the schema asks for"
        return Decision("failed", "fail", detail, error=JobError(kind="job", message=detail))
    if check is None:
        detail = "the structured output was not checked against the schema"
        return Decision("failed", "fail", detail, error=JobError(kind="internal", message=detail))
    if check.timed_out is not None:
        detail = (
            f"checking the structured output against the schema did not finish within {check.timed_out}: a `pattern` "
            "that backtracks catastrophically (nested or overlapping repetition) is the usual cause; not retried"
        )
        return Decision("failed", "fail", detail, error=JobError(kind="input", message=detail))
    if check.problem is not None:
        detail = f"structured output does not match the schema: {check.problem}"
        return Decision("failed", "fail", detail, error=JobError(kind="job", message=detail))
    return Decision("success", "succeed", "success")


def _cannot_start(outcome: RunOutcome, code: int) -> Decision:
    """The CLI could not be started for a reason the same command will hit again: fail now, not retryable."""
    name = errno.errorcode.get(code, str(code))
    if code == errno.E2BIG:
        detail = (
            f"the CLI could not start: Argument list too long ({name}): an argument of the run exceeds the "
            f"{MAX_ARG_STRLEN - 1}-byte limit of one command-line argument"
        )
        kind: ErrorKind = "input"
    else:
        why = " ".join((outcome.stderr_tail or outcome.exception or os.strerror(code)).split())[:300]
        detail = f"the CLI could not start: {os.strerror(code)} ({name}): {why}"
        kind = "configuration"
    return Decision("failed", "fail", detail, error=JobError(kind=kind, message=f"{detail}; not retried"))


def _rate_limit(outcome: RunOutcome, account: AccountConfig, now: datetime, cooldown_s: float) -> Decision | None:
    hint = outcome.limit_hint
    if hint is not None:
        # The pass-through saw the 429 and already cooled the account (fleet-wide) from what the API said, or with
        # the adaptive backoff when it said nothing: the job goes elsewhere or waits for that.
        detail = f"429 on {account.kind} account ({hint.reason}); cooling until {hint.until.isoformat()}"
        return Decision("rate_limited", "reroute", detail)
    rejected = outcome.rejected
    if rejected is not None:
        if rejected.resets_at is not None:
            until = max(rejected.resets_at, now)
            detail = f"rate limited (window {rejected.window or '?'}) until {until.isoformat()}"
        else:
            until = now + timedelta(seconds=cooldown_s)
            detail = f"rate limited without a reset time; cooling {cooldown_s:g} s"
        return Decision("rate_limited", "reroute", detail, cool_until=until)
    if outcome.api_error_status == 429 or outcome.assistant_error == "rate_limit":
        # API-key accounts never get a RateLimitEvent: a plain 429 is all they see.
        until = now + timedelta(seconds=cooldown_s)
        detail = f"429 on {account.kind} account; cooling {cooldown_s:g} s"
        return Decision("rate_limited", "reroute", detail, cool_until=until)
    return None


def _auth_failed(outcome: RunOutcome) -> bool:
    return outcome.assistant_error == "authentication_failed" or outcome.api_error_status == 401


def _retry_or_fail(
    kind: Literal["timeout", "transient_error"], detail: str, remaining: bool, max_attempts: int
) -> Decision:
    reason = "timeout" if kind == "timeout" else "transient"
    if remaining:
        return Decision(kind, "retry", detail, retry_reason=reason)
    error_kind: ErrorKind = "timeout" if kind == "timeout" else "transient"
    message = f"{detail} (gave up after {max_attempts} attempts)"
    return Decision(kind, "fail", detail, error=JobError(kind=error_kind, message=message, retryable=True))


def _transient_detail(outcome: RunOutcome) -> str:
    if outcome.passthrough_failed:
        return f"the worker's model-service pass-through failed during the run: {outcome.passthrough_failed[:300]}"
    if outcome.exception:
        return f"CLI failed: {outcome.exception[:300]}"
    if not outcome.got_result:
        code = f" (exit code {outcome.exit_code})" if outcome.exit_code is not None else ""
        return f"the CLI ended without a result{code}"
    status = f" {outcome.api_error_status}" if outcome.api_error_status else ""
    return f"API error{status}: {_short(outcome)}"


def _short(outcome: RunOutcome) -> str:
    text = outcome.result.text or outcome.assistant_error or outcome.subtype or "no detail"
    return " ".join(text.split())[:300]
