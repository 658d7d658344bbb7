"""Dependent jobs end to end (real workers, the real CLI, the simulator): a diamond of four runs in order, the join
seeing both results in its prompt; a failed root fails its dependents and theirs without running them, and a
dependent with on_dependency_failure = "run" runs anyway."""

from __future__ import annotations

import json

import pytest

from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e


def ran_at(record: JobRecord) -> tuple[float, float]:
    """When the job's successful attempt started and finished (epoch s)."""
    [run] = [a for a in record.attempts if a.outcome == "success"]
    assert run.finished_at is not None
    return run.started_at.timestamp(), run.finished_at.timestamp()


def prompts_seen(simulator: object, marker: str) -> list[str]:
    """The request bodies (as JSON text) the model service received that carry `marker`."""
    seen = [json.dumps(r.get("messages", [])) for r in simulator.requests()]  # type: ignore[attr-defined]
    return [s for s in seen if marker in s]


def test_a_diamond_runs_in_order_and_the_join_reads_both_results(
    client: Client, workers: WorkerFactory, simulator: object, unique: str
) -> None:
    workers(concurrency=4)
    root = client.submit(prompt=f"[[sim: delay 2]] [[sim: text alpha-{unique}]] root {unique}")
    left = client.submit(prompt=f"[[sim: text bravo-{unique}]] left {unique}", depends_on=[root.id])
    right = client.submit(prompt=f"[[sim: text charlie-{unique}]] right {unique}", depends_on=[root.id])
    join = client.submit(
        prompt=f"[[sim: text joined]] join {unique}: {{{{dep[0].text}}}} and {{{{dep[1].text}}}}",
        depends_on=[left.id, right.id],
    )
    assert client.get(join.id).status == "waiting" and client.get(left.id).status == "waiting"
    records = {h.id: client.wait(h.id, timeout=120) for h in (root, left, right, join)}
    assert {r.status for r in records.values()} == {"succeeded"}, [r.error for r in records.values()]
    _, root_end = ran_at(records[root.id])
    for branch in (left, right):
        start, _ = ran_at(records[branch.id])
        assert start >= root_end, "a branch started before the root ended"
    join_start, _ = ran_at(records[join.id])
    assert all(join_start >= ran_at(records[b.id])[1] for b in (left, right)), "the join started before a branch"
    [said] = {s for s in prompts_seen(simulator, f"join {unique}")}
    assert f"bravo-{unique} and charlie-{unique}" in said and "{{dep" not in said


def test_a_failed_root_fails_its_dependents_and_theirs_without_running_them(
    client: Client, workers: WorkerFactory, simulator: object, unique: str
) -> None:
    workers(concurrency=4)
    root = client.submit(prompt=f"[[sim: delay 1]] [[sim: error 500]] root {unique}", max_attempts=1)
    child = client.submit(prompt=f"[[sim: text c]] child {unique}", depends_on=[root.id])
    grandchild = client.submit(prompt=f"[[sim: text g]] grandchild {unique}", depends_on=[child.id])
    anyway = client.submit(
        prompt=f"[[sim: text a]] anyway {unique} {{{{dep[0].status}}}}",
        depends_on=[root.id],
        on_dependency_failure="run",
    )
    assert client.wait(root.id, timeout=120).status == "failed"
    for handle, cause in ((child, root), (grandchild, child)):
        record = client.wait(handle.id, timeout=120)
        assert record.status == "failed" and record.error is not None, record
        assert record.error.kind == "dependency" and cause.id in record.error.message, record.error
        assert [a for a in record.attempts if a.outcome == "success"] == []
    assert client.wait(anyway.id, timeout=120).status == "succeeded"
    assert prompts_seen(simulator, f"child {unique}") == [] and prompts_seen(simulator, f"grandchild {unique}") == []
    assert any(f"anyway {unique} failed" in s for s in prompts_seen(simulator, f"anyway {unique}"))
