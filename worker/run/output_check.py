"""What the worker checks of a run's output before it writes it: that the record can store it (`unstorable`), and
that a structured output matches its job's schema, in a process of its own, with a deadline (`schema_problem`).

A run's result is stored as JSON (claudeq/jobs/_store.py `compact_json`). A value that JSON cannot hold — a structured
output nested deeper than the serialiser's depth limit (255 levels: a model asked for JSON can write one; nothing
caps it on the way), a lone surrogate in a string — makes that write raise, and so would every later write of the
same result: the job would be left `running`, recovered as `worker_lost` and run (and billed) again. So the worker
tries the encoding first and, when it fails, fails the job once (error kind `output`) with what can be stored of
the result (`storable`: without the structured output, without the text if need be), the usage kept.

A schema's `pattern` runs in Python's `re`, which backtracks: `^(a|a)+\\s$` against 27 `a`s and a U+FEFF (which the
CLI accepts: in JavaScript `\\s` matches it) holds the GIL for about 18 s. On the engine's loop — or in a thread of it,
since `re` never releases the GIL — that stops every heartbeat of the worker, leases expire and other workers take
its runs over. So the check runs in a child interpreter (`python -I -c`, no environment: it never sees a secret) that
the worker kills at the deadline; the child also arms an alarm on itself so it dies even if the worker does first.

Why not a linear-time regex engine (google-re2)? It would be a native dependency, and it does not speak the same
dialect: lookarounds and backreferences, valid in JSON Schema, are refused, so some schemas valid today would stop
working, and `pattern` is not the only costly part of a schema. A child process keeps today's semantics exactly, bounds
everything validation does, and costs ~0.1 s per structured-output job only.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from claudeq.jobs import compact_json
from claudeq.models import JobResult, Usage

#: The child's start-up: imports, then "ready" on stdout. Starting an interpreter and importing jsonschema takes
#: ~0.1 s on a quiet machine and seconds on a loaded one, so the deadline starts only once the child says it is ready:
#: a slow start must never fail a valid answer as `input`.
_STARTUP = """
import json, signal, sys
import jsonschema
"""
#: The check: read {"schema", "data"} on stdin, print {"error": message or null}. The alarm ends it (SIGALRM's default
#: action) if nobody else does.
_CHECK = """
sys.stdout.write("ready\\n"); sys.stdout.flush()
signal.alarm(int(sys.argv[1]) + 1)
doc = json.load(sys.stdin)
try:
    jsonschema.validate(doc["data"], doc["schema"])
except jsonschema.ValidationError as exc:
    print(json.dumps({"error": exc.message[:300]}))
else:
    print(json.dumps({"error": None}))
"""
#: How long the child may take to start (a loaded machine); past it the check is an error, never a verdict.
STARTUP_TIMEOUT_S = 120.0


class OutputCheckTimeout(Exception):
    """Validation did not finish by its deadline (the child was killed)."""


async def schema_problem(data: Any, schema: dict[str, Any], timeout_s: float) -> str | None:
    """Why `data` does not match `schema` (None: it matches); OutputCheckTimeout past `timeout_s`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        _STARTUP + _CHECK,
        str(int(timeout_s)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={},
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    payload = json.dumps({"schema": schema, "data": data}).encode()
    try:
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"the schema check did not start within {STARTUP_TIMEOUT_S:g} s") from None
        if ready.strip() != b"ready":
            await proc.wait()
            err = await proc.stderr.read()
            raise RuntimeError(f"the schema check exited {proc.returncode}: {err.decode(errors='replace')[-300:]}")
        try:
            out, _ = await asyncio.wait_for(proc.communicate(payload), timeout_s)
        except TimeoutError:
            raise OutputCheckTimeout(f"did not finish within {timeout_s:g} s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    try:
        reply = json.loads(out)
    except ValueError:
        raise RuntimeError(f"the schema check exited {proc.returncode} without a verdict") from None
    error = reply.get("error")
    return None if error is None else str(error)


def unstorable(result: JobResult) -> str | None:
    """Why the job record cannot store `result` (None: it can): the same encoding as the record's write, tried."""
    try:
        compact_json(result)
    except (ValueError, RecursionError) as exc:  # pydantic's serialisation errors are ValueErrors
        depth = json_depth(result.structured_output)
        if depth >= DEPTH_HINT:
            return f"its structured output nests {depth} levels deep, deeper than a record can hold as JSON"
        return " ".join(str(exc).split())[:300]
    return None


def storable(result: JobResult) -> JobResult:
    """The most of `result` a record can store: without its structured output, then without its text, then its
    usage in tokens and dollars only (what the run cost is never dropped)."""
    usage = result.usage
    bare = Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
        cost_usd=usage.cost_usd,
    )
    for candidate in (
        result.model_copy(update={"structured_output": None}),
        result.model_copy(update={"structured_output": None, "text": None}),
    ):
        if unstorable(candidate) is None:
            return candidate
    return JobResult(num_turns=result.num_turns, duration_ms=result.duration_ms, usage=bare)


#: From this depth on, a structured output that does not encode is reported as too deep (pydantic-core's serialiser
#: stops at 255 levels, the result's own object included).
DEPTH_HINT = 200


def json_depth(value: Any) -> int:
    """How deeply a JSON value nests (objects and arrays), counted without recursion: the value may be deep."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
