"""Session planning hook: which session an attempt starts from, and what to remember after a success.

The engine calls `plan()` before each attempt and `after_success()` after a successful one. For now every attempt
starts a fresh session (a retried or requeued run does not resume); the sessions issue fills these in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from producer.models import JobRecord


@dataclass(frozen=True)
class SessionPlan:
    """How an attempt starts: the RunRequest's session fields."""

    resume: str | None = None
    fork: bool = False
    resume_at: str | None = None
    session_store: Any | None = None


class SessionPlanner:
    """Decides the session of each attempt (fresh, for now)."""

    def plan(self, record: JobRecord) -> SessionPlan:
        """The session fields for the next attempt of `record`."""
        return SessionPlan()

    def after_success(self, record: JobRecord, session_id: str | None) -> None:
        """Called once a run of `record` succeeded with `session_id` (no-op for now)."""
        return None
