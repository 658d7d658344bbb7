"""The schema check in its own process: the same answers as jsonschema, and a hard deadline on a backtracking
`pattern` that leaves no process behind."""

from __future__ import annotations

import pytest

from claudeq.worker.output_check import OutputCheckTimeout, schema_problem
from tests.support.procs import descendants

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def test_a_matching_output_has_no_problem_and_a_mismatch_says_why() -> None:
    assert await schema_problem({"n": 3}, SCHEMA, 10) is None
    assert await schema_problem({"n": "three"}, SCHEMA, 10) == "'three' is not of type 'integer'"


async def test_a_backtracking_pattern_is_cut_off_at_the_deadline_and_its_process_is_gone() -> None:
    import os

    schema = {"type": "string", "pattern": "^(a|a)+\\s$"}
    with pytest.raises(OutputCheckTimeout):
        await schema_problem("a" * 40 + "\ufeff", schema, 1)
    assert descendants(os.getpid()) == []


async def test_a_slow_start_of_the_checker_never_counts_against_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine the child's start-up (interpreter + jsonschema import) can take longer than the deadline:
    a valid answer must still be judged, not failed as a timeout."""
    from claudeq.worker import output_check

    monkeypatch.setattr(output_check, "_STARTUP", output_check._STARTUP + "import time; time.sleep(2)\n")
    assert await schema_problem({"n": 3}, SCHEMA, 1) is None
    assert await schema_problem({"n": "three"}, SCHEMA, 1) == "'three' is not of type 'integer'"
