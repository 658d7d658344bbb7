"""The failure policy (docs/architecture.md#failure-policy), row by row, with plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claudeq.config.account_pool import AccountConfig
from claudeq.models import FREE_OUTCOMES, JobResult
from claudeq.worker.delivery.failure import Decision, OutputCheck, OutputReview, decide
from claudeq.worker.run.outcome import RateLimitSignal, RunOutcome

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
OAUTH = AccountConfig(name="sub", kind="oauth", token_env="T_SUB")
KEY = AccountConfig(name="key", kind="api_key", token_env="T_KEY")


def ok(**kw: Any) -> RunOutcome:
    return RunOutcome(got_result=True, is_error=False, subtype="success", session_id="s1", **kw)


def err(**kw: Any) -> RunOutcome:
    kw.setdefault("got_result", True)
    return RunOutcome(is_error=True, subtype=kw.pop("subtype", "success"), session_id="s1", **kw)


def run(
    outcome: RunOutcome, account: AccountConfig = OAUTH, so_far: int = 0, max_attempts: int = 3, **kw: Any
) -> Decision:
    return decide(outcome, account, so_far, max_attempts, now=NOW, rate_limit_cooldown_s=60, output=OutputReview(**kw))


def test_success_is_decided_from_is_error() -> None:
    d = run(ok())
    assert (d.outcome, d.action, d.error) == ("success", "succeed", None)
    assert d.outcome not in FREE_OUTCOMES


def test_api_error_with_subtype_success_is_not_a_success() -> None:
    d = run(err(api_error_status=529, assistant_error="server_error"))
    assert (d.outcome, d.action, d.retry_reason) == ("transient_error", "retry", "transient")


def test_rejected_rate_limit_with_reset_cools_until_reset_and_reroutes_uncounted() -> None:
    resets = NOW + timedelta(hours=2)
    outcome = err(rate_limits=[RateLimitSignal("rejected", resets_at=resets, window="five_hour")], api_error_status=429)
    d = run(outcome, so_far=2, max_attempts=3)  # even on the last counted attempt: a rate limit is free
    assert (d.outcome, d.action, d.cool_until) == ("rate_limited", "reroute", resets)
    assert d.outcome in FREE_OUTCOMES and d.error is None
    assert "five_hour" in d.detail


def test_rejected_without_reset_cools_for_the_configured_time() -> None:
    d = run(err(rate_limits=[RateLimitSignal("rejected")]))
    assert (d.outcome, d.action, d.cool_until) == ("rate_limited", "reroute", NOW + timedelta(seconds=60))


def test_reset_in_the_past_cools_until_now() -> None:
    d = run(err(rate_limits=[RateLimitSignal("rejected", resets_at=NOW - timedelta(minutes=1))]))
    assert d.cool_until == NOW


@pytest.mark.parametrize(("status", "assistant_error"), [(429, None), (None, "rate_limit"), (429, "rate_limit")])
def test_plain_429_on_api_key_account_cools_briefly(status: int | None, assistant_error: str | None) -> None:
    d = run(err(api_error_status=status, assistant_error=assistant_error), account=KEY, so_far=2)
    assert (d.outcome, d.action, d.cool_until) == ("rate_limited", "reroute", NOW + timedelta(seconds=60))
    assert d.outcome in FREE_OUTCOMES


def test_allowed_warning_is_only_recorded() -> None:
    d = run(ok(rate_limits=[RateLimitSignal("allowed_warning", window="five_hour", utilization=0.91)]))
    assert (d.outcome, d.action, d.cool_until) == ("success", "succeed", None)


def test_earlier_rejection_then_success_is_a_success() -> None:
    d = run(ok(rate_limits=[RateLimitSignal("rejected", resets_at=NOW)]))
    assert d.action == "succeed"


@pytest.mark.parametrize(
    "outcome",
    [
        err(api_error_status=529, assistant_error="server_error"),
        err(api_error_status=500),
        err(api_error_status=503),
        err(api_retries=3, api_error_status=None, terminal_reason="api_error"),  # the CLI's retries exhausted
        RunOutcome(exception="ProcessError: Command failed with exit code 1", exit_code=1),  # crash
        RunOutcome(got_result=False),  # no result
        err(subtype="error_during_execution"),
    ],
)
def test_transient_failures_retry_while_attempts_remain(outcome: RunOutcome) -> None:
    d = run(outcome, so_far=1, max_attempts=3)
    assert (d.outcome, d.action, d.retry_reason, d.error) == ("transient_error", "retry", "transient", None)
    assert d.outcome not in FREE_OUTCOMES


def test_transient_failure_on_the_last_attempt_fails_the_job() -> None:
    d = run(err(api_error_status=529), so_far=2, max_attempts=3)
    assert (d.outcome, d.action) == ("transient_error", "fail")
    assert d.error is not None and d.error.kind == "transient" and "3 attempts" in d.error.message


@pytest.mark.parametrize("stop", ["first_byte", "idle", "deadline"])
def test_watchdog_stops_are_timeouts_and_retried(stop: Any) -> None:
    d = run(RunOutcome(stopped_by=stop), so_far=0, max_attempts=2)
    assert (d.outcome, d.action, d.retry_reason) == ("timeout", "retry", "timeout")
    last = run(RunOutcome(stopped_by=stop), so_far=1, max_attempts=2)
    assert (last.outcome, last.action) == ("timeout", "fail")
    assert last.error is not None and last.error.kind == "timeout" and stop in last.error.message


@pytest.mark.parametrize(("status", "assistant_error"), [(401, None), (None, "authentication_failed")])
def test_auth_failure_disables_the_account_and_reroutes(status: int | None, assistant_error: str | None) -> None:
    d = run(err(api_error_status=status, assistant_error=assistant_error, result=JobResult(text="Not logged in")))
    assert (d.outcome, d.action) == ("auth_failed", "reroute")
    assert d.disable_reason is not None and "sub" in d.disable_reason and "Not logged in" in d.disable_reason


def test_auth_failure_on_last_attempt_fails_with_account_error() -> None:
    d = run(err(assistant_error="authentication_failed"), so_far=2, max_attempts=3)
    assert (d.outcome, d.action) == ("auth_failed", "fail")
    assert d.error is not None and d.error.kind == "account"
    assert d.disable_reason is not None


@pytest.mark.parametrize("subtype", ["error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"])
def test_job_failures_are_not_retried(subtype: str) -> None:
    d = run(err(subtype=subtype, result=JobResult(text="partial")), so_far=0, max_attempts=5)
    assert (d.outcome, d.action) == ("failed", "fail")
    assert d.error is not None and d.error.kind == "job" and subtype in d.error.message


def test_a_request_the_api_refuses_is_not_retried() -> None:
    d = run(err(api_error_status=400, result=JobResult(text="prompt is too long")))
    assert (d.outcome, d.action) == ("failed", "fail")
    assert d.error is not None and d.error.kind == "job"


def test_cancel_wins_over_everything() -> None:
    d = run(RunOutcome(stopped_by="cancel", got_result=True, is_error=True, api_error_status=529))
    assert (d.outcome, d.action) == ("cancelled", "cancel")
    assert d.error is not None and d.error.kind == "cancelled"


def test_shutdown_requeues_uncounted() -> None:
    d = run(RunOutcome(stopped_by="shutdown"), so_far=2, max_attempts=3)
    assert (d.outcome, d.action, d.error) == ("requeued", "requeue", None)
    assert d.outcome in FREE_OUTCOMES


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_structured_output_matching_the_schema_succeeds() -> None:
    d = run(ok(result=JobResult(structured_output={"n": 3})), schema=SCHEMA, check=OutputCheck())
    assert d.action == "succeed"


@pytest.mark.parametrize("data", [None, {"n": "three"}, {}])
def test_structured_output_missing_or_invalid_is_a_job_failure(data: Any) -> None:
    check = OutputCheck(problem="'n' is a required property")
    d = run(ok(result=JobResult(structured_output=data)), schema=SCHEMA, check=check)
    assert (d.outcome, d.action) == ("failed", "fail")
    assert d.error is not None and d.error.kind == "job"


def test_a_schema_check_past_its_deadline_fails_for_good_naming_the_pattern() -> None:
    check = OutputCheck(timed_out="2 s")
    d = run(ok(result=JobResult(structured_output={"n": 1})), schema=SCHEMA, check=check)
    assert (d.outcome, d.action) == ("failed", "fail")
    assert d.error is not None and d.error.kind == "input" and not d.error.retryable
    assert "within 2 s" in d.error.message and "pattern" in d.error.message


@pytest.mark.parametrize(
    "outcome", [ok(), err(api_error_status=529), RunOutcome(stopped_by="shutdown"), RunOutcome(stopped_by="idle")]
)
def test_an_output_that_cannot_be_stored_fails_the_job_once_as_output(outcome: RunOutcome) -> None:
    d = run(outcome, schema=SCHEMA, unstorable="its structured output nests 255 levels deep")
    assert (d.outcome, d.action) == ("failed", "fail")  # never retried, requeued or rerouted: it was paid for
    assert d.error is not None and d.error.kind == "output" and not d.error.retryable
    assert "255 levels deep" in d.error.message and "not retried" in d.error.message


def test_a_cancel_still_wins_over_an_output_that_cannot_be_stored() -> None:
    d = run(RunOutcome(stopped_by="cancel"), unstorable="too deep")
    assert (d.outcome, d.action) == ("cancelled", "cancel")


def test_a_structured_output_never_checked_is_not_a_success() -> None:
    d = run(ok(result=JobResult(structured_output={"n": 1})), schema=SCHEMA)
    assert d.action == "fail"


outcomes = st.builds(
    RunOutcome,
    got_result=st.booleans(),
    is_error=st.booleans(),
    subtype=st.sampled_from([None, "success", "error_max_turns", "error_during_execution"]),
    api_error_status=st.sampled_from([None, 400, 401, 429, 500, 529]),
    assistant_error=st.sampled_from([None, "rate_limit", "authentication_failed", "server_error"]),
    rate_limits=st.lists(
        st.builds(
            RateLimitSignal,
            status=st.sampled_from(["allowed", "allowed_warning", "rejected"]),
            resets_at=st.sampled_from([None, NOW + timedelta(hours=1)]),
        ),
        max_size=3,
    ),
    stopped_by=st.sampled_from([None, "first_byte", "idle", "deadline", "cancel", "shutdown"]),
    exception=st.sampled_from([None, "ProcessError: boom"]),
)


@given(outcomes, st.sampled_from([OAUTH, KEY]), st.integers(0, 5), st.integers(1, 6))
def test_every_outcome_gets_a_consistent_decision(
    outcome: RunOutcome, account: AccountConfig, so_far: int, max_attempts: int
) -> None:
    d = run(outcome, account=account, so_far=so_far, max_attempts=max_attempts)
    # Finishing actions carry an error (except success); going on never does.
    assert (d.error is not None) == (d.action in ("fail", "cancel"))
    # A counted retry never goes beyond max attempts.
    if d.action == "retry":
        assert so_far + 1 < max_attempts
    # Free outcomes never fail a job for running out of attempts.
    if d.outcome in FREE_OUTCOMES:
        assert d.action in ("reroute", "requeue")
    if d.action == "succeed":
        assert outcome.got_result and not outcome.is_error
    assert d.detail
