"""A schema whose `pattern` backtracks catastrophically in Python's `re` (the CLI, in JavaScript, accepts the answer:
there `\\s` matches U+FEFF). Validating it must neither freeze the worker's event loop — every other run's heartbeat
goes on, no lease expires, no job is taken over — nor run unbounded: the job fails with a clear error."""

from __future__ import annotations

import json

import pytest

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import claude_pids, run_until

pytestmark = pytest.mark.e2e

SCHEMA = {
    "type": "object",
    "properties": {"s": {"type": "string", "pattern": "^(a|a)+\\s$"}},
    "required": ["s"],
}


def test_a_backtracking_pattern_neither_freezes_the_worker_nor_runs_unbounded(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    workers(concurrency=2, output_check_timeout_s=2)  # both jobs run here, beside each other
    bystander = client.submit(prompt=f"[[sim: delay 12]] [[sim: text fine]] a long run {unique}", idle_timeout_s=60)
    run_until(lambda: claude_pids([bystander.id]), 60, what="the bystander's CLI")
    answer = json.dumps({"s": "a" * 26 + "\ufeff"})
    hostile = client.submit(prompt=f"[[sim: structured {answer}]] hostile {unique}", output_schema=SCHEMA)

    record = client.wait(hostile.id, timeout=120, poll_s=0.2)
    assert record.status == "failed", (record.attempts, [e.type for e in client.events(hostile.id)])
    assert record.error is not None and record.error.kind == "input" and not record.error.retryable, record.attempts
    assert "did not finish within 2 s" in record.error.message and "pattern" in record.error.message
    assert len(record.attempts) == 1  # not retried: the same answer would hit the same wall

    other = client.wait(bystander.id, timeout=120, poll_s=0.2)
    assert other.status == "succeeded", other.error
    # Its lease held all along: never lost, never run twice (a loop frozen past the lease lets it expire; the
    # reconciler then records `worker_lost` and runs it again).
    assert [a.outcome for a in other.attempts] == ["success"]
