"""A small app that hands work to a claudeq fleet: triage issues (one job each, structured verdicts), collect the
verdicts whatever became of each job, and ask follow-up questions in a conversation.

Its tests (tests/test_triage.py) run it against `claudeq.testing`: no Redis, no CLI, no worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from claudeq.producer.client import Client, JobHandle

#: What each triage job must answer (the job fails, kind `job`, when the answer does not match).
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"label": {"enum": ["bug", "feature", "question"]}, "urgent": {"type": "boolean"}},
    "required": ["label", "urgent"],
}


@dataclass(frozen=True)
class Verdict:
    """What became of one issue's triage."""

    issue: str
    label: str | None = None
    urgent: bool = False
    error: str | None = None  # the job's error kind when it did not succeed


def submit_triage(client: Client, issues: dict[str, str], *, day: str) -> dict[str, JobHandle]:
    """One job per issue; submitting the same day again gives the same jobs (idempotency keys)."""
    return {
        key: client.submit(
            prompt=f"Triage issue {key}: label it bug, feature or question, and say if it is urgent.\n\n{body}",
            output_schema=VERDICT_SCHEMA,
            idempotency_key=f"triage-{day}-{key}",
            metadata={"issue": key},
            max_attempts=3,
        )
        for key, body in issues.items()
    }


def collect(handles: dict[str, JobHandle], timeout: float = 3600) -> list[Verdict]:
    """Wait for every job and turn its record into a verdict."""
    verdicts = []
    for key, handle in handles.items():
        record = handle.wait(timeout=timeout)
        if record.status == "succeeded" and record.result is not None:
            answer = record.result.structured_output or {}
            verdicts.append(Verdict(key, answer.get("label"), bool(answer.get("urgent"))))
        else:
            verdicts.append(Verdict(key, error=record.error.kind if record.error else record.status))
    return verdicts


def ask(client: Client, conversation: str, question: str) -> str:
    """One turn of a conversation with the fleet; the answer's text."""
    record = client.submit(prompt=question, conversation=conversation).wait(timeout=600)
    if record.status != "succeeded" or record.result is None:
        raise RuntimeError(f"the fleet did not answer: {record.error.message if record.error else record.status}")
    return record.result.text or ""


def retries_seen(client: Client, handle: JobHandle) -> int:
    """How many times the fleet retried a job (from its events)."""
    return sum(1 for event in client.events(handle.id) if event.type == "retry")
