"""Process helpers for tests: find the `claude` CLIs of a test's jobs, descendants of a process, and poll."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from claudeq.worker.run import procs

T = TypeVar("T")


def claude_pids(job_ids: Iterable[str]) -> list[int]:
    """Live processes started for any of these jobs (the runner puts CLAUDEQ_JOB_ID=<id> in each CLI's env)."""
    wanted = set(job_ids)
    return sorted(pid for pid, job_id in procs.all_job_pids().items() if job_id in wanted)


def count_claude(job_ids: Iterable[str]) -> int:
    """How many CLI processes of these jobs are alive."""
    return len(claude_pids(job_ids))


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return sorted(found)


def run_until(predicate: Callable[[], T], timeout: float, interval: float = 0.1, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy (returned); AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s (last value {value!r})")
        time.sleep(interval)


def kill_claude(job_ids: Iterable[str]) -> list[int]:
    """Kill what is left of these jobs' CLIs (test teardown); returns the pids that had to be killed."""
    pids = claude_pids(job_ids)
    procs.kill_and_wait(pids)
    return pids
