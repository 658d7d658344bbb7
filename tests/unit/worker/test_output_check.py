"""The schema check in its own process: the same answers as jsonschema, and a hard deadline on a backtracking
`pattern` that leaves no process behind."""

from __future__ import annotations

import pytest

from claudeq.jobs import compact_json
from claudeq.models import JobResult, Usage
from claudeq.worker.run.output_check import OutputCheckTimeout, json_depth, schema_problem, storable, unstorable
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
    from claudeq.worker.run import output_check

    monkeypatch.setattr(output_check, "_STARTUP", output_check._STARTUP + "import time; time.sleep(2)\n")
    assert await schema_problem({"n": 3}, SCHEMA, 1) is None
    assert await schema_problem({"n": "three"}, SCHEMA, 1) == "'three' is not of type 'integer'"


def nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"a": value}
    return value


def test_an_output_the_record_can_store_has_no_problem() -> None:
    assert unstorable(JobResult(text="ok", structured_output=nested(200), usage=Usage(cost_usd=0.1))) is None
    assert json_depth(nested(200)) == 200 and json_depth([[], {"x": [1]}]) == 3 and json_depth(1) == 0


def test_an_output_too_deep_or_not_encodable_is_unstorable_and_what_can_be_stored_keeps_the_usage() -> None:
    usage = Usage(input_tokens=5, output_tokens=7, cost_usd=0.02, model_usage={"m": {"costUSD": 0.02}})
    deep = JobResult(text="deep", structured_output=nested(255), num_turns=1, usage=usage)
    problem = unstorable(deep)
    assert problem is not None and "255 levels deep" in problem
    kept = storable(deep)
    assert unstorable(kept) is None and compact_json(kept)  # the failure's own write cannot fail for it
    assert (kept.structured_output, kept.text, kept.usage, kept.num_turns) == (None, "deep", usage, 1)
    # A lone surrogate (valid JSON escape, not UTF-8) in the text as well: the text goes too, the usage stays.
    broken = JobResult(text="\ud800", structured_output={"s": "\ud800"}, usage=usage)
    assert unstorable(broken) is not None
    assert (storable(broken).text, storable(broken).usage) == (None, usage)
