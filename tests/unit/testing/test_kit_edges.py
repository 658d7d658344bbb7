"""claudeq.testing's rough edges smoothed: one unit for durations, failures that say what they are, one log line per
disabled account, and a prompt no rule matches failing the test instead of passing quietly."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from claudeq.testing import Reply, UnmatchedPrompt, api_error, auth_failed, fleet, overloaded, rate_limited


def test_a_duration_is_seconds_or_a_timedelta_so_now_and_advance_agree() -> None:
    with fleet() as f:
        f.fail("report", rate_limited(resets_in=3600))
        f.reply("report", text="done")
        job = f.client.submit(prompt="nightly report")
        step = f.step()
        assert step is not None and step.outcome == "deferred"
        ready_at = f.record(job.id).ready_at
        assert ready_at is not None
        before = f.now()
        f.advance(ready_at - f.now())  # a datetime difference is a duration
        assert f.now() - before >= timedelta(seconds=3599)
        f.advance(1.5)  # and so are seconds
        assert job.wait(timeout=timedelta(minutes=5)).status == "succeeded"


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (400, "invalid_request_error", "Bad request"),
        (403, "permission_error", "Forbidden"),
        (404, "not_found_error", "Not found"),
        (500, "api_error", "Internal server error"),
        (503, "api_error", "Service unavailable"),
    ],
)
def test_an_api_error_says_what_its_status_means(status: int, kind: str, words: str) -> None:
    message = api_error(status).message
    assert message.startswith(f"API Error: {status} ") and kind in message and words in message, message


def test_an_api_errors_own_message_is_kept() -> None:
    assert "prompt is too long" in api_error(400, "prompt is too long").message


def test_a_disabled_account_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), fleet(accounts=["default", "spare"]) as f:
        f.fail("x", auth_failed())
        f.reply("x", text="fine")
        assert f.client.submit(prompt="x").wait().status == "succeeded"
    said = [r.getMessage() for r in caplog.records if "disabled" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("account default disabled: "), said


def test_a_prompt_no_rule_matches_fails_the_test_and_lists_the_rules() -> None:
    with fleet() as f:
        f.fail(r"^triage", overloaded())
        f.reply(r"^triage", text="two need a look")
        job = f.client.submit(prompt="traige the issues")  # the typo a quiet "ok" would hide
        with pytest.raises(UnmatchedPrompt) as raised:
            job.wait()
        message = str(raised.value)
        assert "'traige the issues'" in message and job.id in message
        assert "fail '^triage' (1 left: overloaded)" in message and "reply '^triage' (every run)" in message
        assert "default=" in message
        assert f.record(job.id).status == "failed"  # the job ends; the test fails


def test_a_default_answers_what_no_rule_matches_and_no_rules_answer_ok() -> None:
    with fleet(default=Reply(text="fallback")) as f:
        f.reply(r"^triage", text="two need a look")
        assert f.client.submit(prompt="anything else").wait().result.text == "fallback"  # type: ignore[union-attr]
    with fleet() as f:  # no rule given: nothing to mistype, every run answers "ok"
        assert f.client.submit(prompt="anything").wait().result.text == "ok"  # type: ignore[union-attr]
