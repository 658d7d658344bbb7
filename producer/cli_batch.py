"""`claudeq submit --from-file jobs.jsonl`: many jobs from one file, one JSON spec per line, with `submit_many`.

All or nothing: every line is read and validated first; if any is refused, each problem is printed with its line
number and nothing is submitted (exit 2). Then the jobs go in pipelined chunks behind a progress bar (stderr), the
ids one per line on stdout (or one JSON document with `--json`), and a summary on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from claudeq.errors import BatchSpecError

from .cli_output import styled
from .client import SUBMIT_CHUNK, Client

#: Same as claudeq.producer.cli.EXIT_BAD_INPUT (kept here so this module needs nothing of the CLI's).
EXIT_BAD_INPUT = 2


def read_specs(path: str, defaults: dict[str, Any]) -> tuple[list[int], list[dict[str, Any]], list[tuple[int, str]]]:
    """(line numbers, specs, problems) of a JSONL file (`-` = stdin); blank lines are skipped. Each line's fields
    win over `defaults` (the command line's options)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        return [], [], [(0, f"cannot read {path}: {reason}")]
    lines: list[int] = []
    specs: list[dict[str, Any]] = []
    problems: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append((number, f"not JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(data, dict):
            problems.append((number, "not a JSON object (one job spec per line)"))
            continue
        lines.append(number)
        specs.append({**defaults, **data})
    if not lines and not problems:
        problems.append((0, f"{path}: no job specs (one JSON object per line)"))
    return lines, specs, problems


def submit_from_file(client: Client, path: str, defaults: dict[str, Any], as_json: bool, err: Console) -> None:
    """Read, validate and submit every spec of `path`; exits 2 with every problem when anything is refused."""
    lines, specs, problems = read_specs(path, defaults)
    try:
        client.validate_many(specs)  # every line is checked, so one run of the command reports every problem
    except BatchSpecError as exc:
        problems += [(lines[index], f"{field}: {reason}") for index, field, reason in exc.items]
    if problems:
        problems.sort()
        if as_json:
            print(
                json.dumps(
                    {
                        "error": f"{len({n for n, _ in problems})} line(s) refused; nothing submitted",
                        "lines": [{"line": n, "reason": reason} for n, reason in problems],
                    }
                )
            )
        else:
            for number, reason in problems:
                where = f"line {number}: " if number else ""
                err.print(styled(("error:", "red"), f" {where}{reason}"))
            err.print(f"nothing submitted ({len({n for n, _ in problems})} line(s) refused)")
        raise typer.Exit(EXIT_BAD_INPUT)
    started = time.monotonic()
    show = not as_json and err.is_terminal
    progress = Progress(
        TextColumn("submitting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not show,
    )
    with progress:
        task = progress.add_task("submit", total=len(specs))
        handles = client.submit_many(
            specs, chunk_size=SUBMIT_CHUNK, progress=lambda done: progress.update(task, completed=done)
        )
    took = max(time.monotonic() - started, 1e-9)
    created = sum(1 for h in handles if h.created)
    if as_json:
        jobs = [{"line": n, "id": h.id, "created": h.created} for n, h in zip(lines, handles, strict=True)]
        print(json.dumps({"submitted": len(handles), "created": created, "jobs": jobs}))
        return
    sys.stdout.write("".join(f"{h.id}\n" for h in handles))
    existing = len(handles) - created
    note = f" ({existing} already existed: same idempotency key)" if existing else ""
    err.print(
        f"submitted {len(handles)} jobs from {path}{note} in {took:.1f} s ({len(handles) / took:,.0f} jobs/s)",
        highlight=False,
    )
