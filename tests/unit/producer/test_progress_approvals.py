"""What `--follow` and MCP's progress say of the approval events (producer/progress.py)."""

from __future__ import annotations

from claudeq.events import ApprovalDecided, ApprovalRequested
from claudeq.producer.progress import describe


def test_a_request_and_its_decision_read_as_sentences() -> None:
    asked = ApprovalRequested(
        request_id="apr-1", tool="Bash", input={"command": "git push"}, expires_at="2026-01-02T00:00:00+00:00"
    ).event(1)
    assert describe(asked) == 'waiting for approval of Bash {"command": "git push"} (apr-1)'
    denied = ApprovalDecided(
        request_id="apr-1", approve=False, by="tenant:t", reason="no", decided_at="2026-01-01T00:00:00+00:00"
    ).event(1)
    assert describe(denied) == "denied by tenant:t (apr-1): no"
