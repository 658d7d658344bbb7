"""claudeq.testing: how long a suite of 50 tests of code that submits jobs takes (docs/testing.md#how-fast).

The suite is written to a temporary folder and run by pytest in a fresh process, as a user runs it: 50 tests, each on
a fleet of its own (the `claudeq_fleet` fixture), cycling through ten scenarios users test — a plain answer, a
structured output, tool calls, a 529 retried, a rate limit waited out until the next window (an hour of virtual
time), a reroute after a 401, an idle stall stopped by the watchdog, errors past max attempts, a conversation's two
turns, idempotent re-submits. The baseline is the same 50 tests with empty bodies (pytest and the imports alone), in
the same run. Prints the wall time of each (process start to exit, the figure the acceptance asks for: under 5 s),
pytest's own session time, and the ratio.

    .venv/bin/python -m bench.bench_testing [--tests 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = """
from claudeq.testing import Fleet, Reply, auth_failed, overloaded, rate_limited, timeout, api_error
"""

SCENARIOS = [
    """
    claudeq_fleet.reply("hello", text="hi")
    assert claudeq_fleet.client.submit(prompt="hello").wait().result.text == "hi"
""",
    """
    claudeq_fleet.reply("count", structured={"n": 3})
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    record = claudeq_fleet.client.submit(prompt="count", output_schema=schema).wait()
    assert record.result.structured_output == {"n": 3}
""",
    """
    claudeq_fleet.reply("look", tool_calls=[("Grep", {"pattern": "x"}), "Read"])
    job = claudeq_fleet.client.submit(prompt="look")
    job.wait()
    assert claudeq_fleet.event_types(job.id).count("tool_call") == 2
""",
    """
    claudeq_fleet.fail("x", overloaded())
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert [a.outcome for a in record.attempts] == ["transient_error", "success"]
""",
    """
    claudeq_fleet.fail("x", rate_limited(resets_in=3600))
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert [a.outcome for a in record.attempts] == ["rate_limited", "success"]
""",
    """
    claudeq_fleet.fail("x", auth_failed())
    record = claudeq_fleet.client.submit(prompt="x", max_attempts=1).wait()
    assert record.status == "failed" and record.error.kind == "account"
""",
    """
    claudeq_fleet.fail("x", timeout())
    record = claudeq_fleet.client.submit(prompt="x", idle_timeout_s=30).wait()
    assert [a.outcome for a in record.attempts] == ["timeout", "success"]
""",
    """
    claudeq_fleet.fail("x", api_error(500), api_error(500), api_error(500))
    assert claudeq_fleet.client.submit(prompt="x").wait().status == "failed"
""",
    """
    claudeq_fleet.reply(lambda run: "again" if run.resume else "first")
    assert claudeq_fleet.client.submit(prompt="a", conversation="c").wait().result.text == "first"
    assert claudeq_fleet.client.submit(prompt="b", conversation="c").wait().result.text == "again"
""",
    """
    a = claudeq_fleet.client.submit(prompt="x", idempotency_key="k")
    b = claudeq_fleet.client.submit(prompt="x", idempotency_key="k")
    claudeq_fleet.run_until_idle()
    assert a.id == b.id and len(claudeq_fleet.runs) == 1
""",
]

CONFIG = """
[tool.pytest.ini_options]
addopts = ["-p", "no:cacheprovider"]
filterwarnings = ["ignore::pytest.PytestDeprecationWarning"]
"""


def write_suite(folder: Path, tests: int, empty: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(CONFIG)
    body = [HEADER]
    for i in range(tests):
        scenario = "\n    pass\n" if empty else SCENARIOS[i % len(SCENARIOS)]
        fixture = "" if empty else "claudeq_fleet: Fleet"
        body.append(f"\ndef test_{i}({fixture}) -> None:{scenario}")
    (folder / "test_suite.py").write_text("".join(body))


def run_suite(folder: Path, tests: int) -> tuple[float, float]:
    """(wall s from process start to exit, pytest's own session s)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(folder)], cwd=folder, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 or f"{tests} passed" not in done.stdout:
        raise SystemExit(f"the suite failed:\n{done.stdout}\n{done.stderr}")
    found = re.search(r"passed in ([0-9.]+)s", done.stdout)
    return wall, float(found.group(1)) if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="claudeq-bench-testing-") as tmp:
        kit, empty = Path(tmp) / "kit", Path(tmp) / "empty"
        write_suite(kit, args.tests, empty=False)
        write_suite(empty, args.tests, empty=True)
        kits, empties = [], []
        for round_ in range(args.rounds):
            kits.append(run_suite(kit, args.tests))
            empties.append(run_suite(empty, args.tests))
            print(
                f"round {round_ + 1}: kit {kits[-1][0]:.2f} s wall ({kits[-1][1]:.2f} s in pytest), "
                f"empty {empties[-1][0]:.2f} s wall ({empties[-1][1]:.2f} s in pytest)"
            )
    kit_wall = statistics.median(w for w, _ in kits)
    kit_session = statistics.median(s for _, s in kits)
    empty_wall = statistics.median(w for w, _ in empties)
    empty_session = statistics.median(s for _, s in empties)
    per_test_ms = (kit_session - empty_session) / args.tests * 1000
    verdict = "met" if kit_wall < 5 else "MISSED"
    print(f"{args.tests} tests on claudeq.testing: median {kit_wall:.2f} s wall (target < 5 s: {verdict})")
    print(f"  in pytest {kit_session:.2f} s vs {empty_session:.2f} s for empty tests: {per_test_ms:.1f} ms per test")
    print(f"  ratio kit / empty suite, wall: {kit_wall / empty_wall:.2f}x")


if __name__ == "__main__":
    main()
