"""Dependent jobs (`depends_on`, docs/dependencies.md): what a job's dependencies decide when it may run, and the
placeholders that put their results into its prompt.

A placeholder names a dependency by its place in `depends_on`:

- `{{dep[0].id}}`, `{{dep[0].status}}`;
- `{{dep[0].text}}`: its result's text;
- `{{dep[0].structured}}`: its structured output as JSON, or `{{dep[0].structured.labels.0}}` one field of it
  (a string as it is, anything else as JSON).

Checked at submit (an index past `depends_on` is refused with the field); resolved by the worker before the job's
first attempt, from the dependencies' records (each a job of the same tenant).
"""

from __future__ import annotations

import json
import re
from typing import Any

from claudeq.errors import RecordUnreadable
from claudeq.models import TERMINAL, JobError, JobRecord, JobSpec

PLACEHOLDER = re.compile(r"\{\{\s*dep\[(\d+)\]\.(id|status|text|structured)((?:\.[A-Za-z0-9_-]+)*)\s*\}\}")
#: Longest text one placeholder puts into a prompt (a dependency's answer can be long).
PLACEHOLDER_CHARS = 200_000


def placeholder_problems(spec: JobSpec) -> list[tuple[str, str]]:
    """The placeholders of `spec.prompt` that name no dependency, as (field, reason)."""
    bad = sorted({int(m[1]) for m in PLACEHOLDER.finditer(spec.prompt) if int(m[1]) >= len(spec.depends_on)})
    if not bad:
        return []
    have = len(spec.depends_on)
    return [("prompt", f"dep[{bad[0]}] names no dependency (depends_on has {have} job{'s' * (have != 1)})")]


def _field(value: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(".".join(path))
    return value


def settle(spec: JobSpec, records: list[JobRecord | RecordUnreadable | None]) -> JobError | str:
    """What the dependencies' records (in `depends_on` order; None: gone) decide: a JobError (kind `dependency`)
    when the job may not run, else its prompt with the placeholders filled in. Another tenant's job is as if gone
    (submit refuses it; this holds against a writer that went round the client)."""
    records = [r if isinstance(r, JobRecord) and r.spec.tenant == spec.tenant else None for r in records]
    for dep, record in zip(spec.depends_on, records, strict=True):
        if not isinstance(record, JobRecord):
            if spec.on_dependency_failure == "run":
                continue
            return JobError(kind="dependency", message=f"dependency {dep} is gone (its retention ended)")
        if record.status not in TERMINAL:
            return JobError(kind="dependency", message=f"dependency {dep} is still {record.status}")
        if record.status != "succeeded" and spec.on_dependency_failure == "fail":
            why = f": {record.error.message}" if record.error else ""
            return JobError(kind="dependency", message=f"dependency {dep} {record.status}{why}"[:2000])

    problem: list[str] = []

    def fill(match: re.Match[str]) -> str:
        index, what = int(match[1]), match[2]
        path = [p for p in match[3].split(".") if p]
        record = records[index] if index < len(records) else None
        if not isinstance(record, JobRecord):
            problem.append(f"{match[0]}: dependency {spec.depends_on[index]} is gone")
            return ""
        if what == "id":
            return record.id
        if what == "status":
            return record.status
        result = record.result
        if what == "text":
            return (result.text or "" if result else "")[:PLACEHOLDER_CHARS]
        data = result.structured_output if result else None
        try:
            value = _field(data, path)
        except KeyError:
            problem.append(f"{match[0]}: dependency {record.id} has no structured output field {'.'.join(path)}")
            return ""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return text[:PLACEHOLDER_CHARS]

    prompt = PLACEHOLDER.sub(fill, spec.prompt)
    if problem:
        return JobError(kind="dependency", message=problem[0][:2000])
    return prompt
