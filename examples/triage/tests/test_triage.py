"""The triage app's tests: they import only claudeq, claudeq.testing and the app (docs/testing.md)."""

from __future__ import annotations

import pytest
from triage import Verdict, ask, collect, retries_seen, submit_triage

import claudeq.testing
from claudeq.testing import Fleet, auth_failed, overloaded, rate_limited

ISSUES = {"ISSUE-1": "Crash on start", "ISSUE-2": "Add dark mode"}


def script(fleet: Fleet) -> None:
    fleet.reply(r"issue ISSUE-1", structured={"label": "bug", "urgent": True})
    fleet.reply(r"issue ISSUE-2", structured={"label": "feature", "urgent": False})


def test_every_issue_gets_a_verdict(claudeq_fleet: Fleet) -> None:
    script(claudeq_fleet)
    verdicts = collect(submit_triage(claudeq_fleet.client, ISSUES, day="2026-12-04"))
    assert verdicts == [Verdict("ISSUE-1", "bug", True), Verdict("ISSUE-2", "feature", False)]
    assert [spec.metadata["issue"] for spec in claudeq_fleet.specs()] == ["ISSUE-1", "ISSUE-2"]


def test_a_rate_limit_waits_for_the_next_window(claudeq_fleet: Fleet) -> None:
    script(claudeq_fleet)
    claudeq_fleet.fail(r"issue ISSUE-1", rate_limited(resets_in=5 * 3600))
    start = claudeq_fleet.now()
    verdicts = collect(submit_triage(claudeq_fleet.client, ISSUES, day="d"), timeout=6 * 3600)
    assert verdicts[0] == Verdict("ISSUE-1", "bug", True)
    assert (claudeq_fleet.now() - start).total_seconds() >= 5 * 3600  # virtual hours, real milliseconds


def test_overloaded_is_retried_and_the_app_sees_the_retry(claudeq_fleet: Fleet) -> None:
    script(claudeq_fleet)
    claudeq_fleet.fail(r"issue ISSUE-2", overloaded())
    handles = submit_triage(claudeq_fleet.client, ISSUES, day="d")
    assert all(v.error is None for v in collect(handles))
    assert retries_seen(claudeq_fleet.client, handles["ISSUE-2"]) == 1
    outcomes = [a.outcome for a in claudeq_fleet.record(handles["ISSUE-2"].id).attempts]
    assert outcomes == ["transient_error", "success"]


@pytest.mark.claudeq_fleet(max_attempts=1)
def test_a_bad_account_ends_in_an_error_verdict(claudeq_fleet: Fleet) -> None:
    script(claudeq_fleet)
    claudeq_fleet.fail(r"issue ISSUE-1", auth_failed(), auth_failed(), auth_failed())
    verdicts = collect(submit_triage(claudeq_fleet.client, ISSUES, day="d"))
    assert verdicts[0] == Verdict("ISSUE-1", error="account")


def test_an_answer_that_breaks_the_schema_is_an_error_verdict(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply(r"issue", structured={"label": "chore", "urgent": "no"})
    verdicts = collect(submit_triage(claudeq_fleet.client, {"ISSUE-3": "Tidy up"}, day="d"))
    assert verdicts == [Verdict("ISSUE-3", error="job")]


def test_submitting_the_same_day_twice_runs_each_issue_once(claudeq_fleet: Fleet) -> None:
    script(claudeq_fleet)
    first = submit_triage(claudeq_fleet.client, ISSUES, day="d")
    again = submit_triage(claudeq_fleet.client, ISSUES, day="d")
    assert {k: h.id for k, h in first.items()} == {k: h.id for k, h in again.items()}
    collect(again)
    assert len(claudeq_fleet.runs) == 2


def test_a_conversation_remembers(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply(lambda run: "it was ISSUE-1" if run.resume else "noted")
    assert ask(claudeq_fleet.client, "standup", "Remember: ISSUE-1 is the worst") == "noted"
    assert ask(claudeq_fleet.client, "standup", "Which was the worst?") == "it was ISSUE-1"


def test_eager_use_in_a_script() -> None:
    with claudeq.testing.fleet() as fleet:
        script(fleet)
        assert collect(submit_triage(fleet.client, {"ISSUE-1": "Crash"}, day="d"))[0].label == "bug"
