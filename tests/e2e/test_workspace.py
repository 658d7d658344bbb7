"""Workspace confinement with the real CLI: file tools reaching outside the workspace roots are denied.

The PreToolUse hook (worker/options.py) is what keeps Read, Glob and Grep inside the roots: the tools are in
`allowed_tools`, so the CLI asks nobody. Here the simulator's tool directive makes the real CLI call each tool
outside the roots, directly and through a symlink inside a root that points out; the tool result, the events and
the job record say it was denied, and nothing of the outside file reaches the job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

DENIED = "outside the workspace roots"


@pytest.fixture
def dirs(tmp_path: Path, unique: str) -> tuple[Path, Path]:
    """(workspace root, a folder outside it); the root holds a file and a symlink pointing out."""
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "inside.txt").write_text(f"inside-content-{unique}\n")
    (outside / "secret.txt").write_text(f"outside-content-{unique}\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    return root, outside


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, dirs: tuple[Path, Path]) -> Settings:
    root, _ = dirs
    policy = WorkerPolicy(workspace_roots=[root])
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, policy=policy, **{**FAST_E2E, "concurrency": 4}
    )


def submit_tool(client: Client, root: Path, tool: str, tool_input: dict[str, Any], nonce: str) -> str:
    prompt = f"[[sim: tool {tool} {json.dumps(tool_input)}]] use {tool} ({nonce})"
    return client.submit(prompt=prompt, tools="read-only", cwd=str(root)).id


def tool_result(client: Client, job_id: str) -> dict[str, Any]:
    results = [e.data for e in client.events(job_id) if e.type == "tool_result"]
    assert len(results) == 1, results
    return results[0]


def everything_stored(client: Client, record: JobRecord) -> str:
    return json.dumps(record.public()) + json.dumps([e.model_dump(mode="json") for e in client.events(record.id)])


def test_file_tools_outside_the_roots_are_denied_with_the_real_cli(
    client: Client, workers: WorkerFactory, dirs: tuple[Path, Path], unique: str
) -> None:
    root, outside = dirs
    workers()
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "read outside": ("Read", {"file_path": str(outside / "secret.txt")}),
        "read through symlink": ("Read", {"file_path": str(root / "link" / "secret.txt")}),
        "glob outside": ("Glob", {"pattern": "*.txt", "path": str(outside)}),
        "glob through symlink": ("Glob", {"pattern": "*.txt", "path": str(root / "link")}),
        "glob pattern climbing out": ("Glob", {"pattern": "../outside/*.txt"}),
        "grep outside": ("Grep", {"pattern": "outside-content", "path": str(outside), "output_mode": "content"}),
        "grep through symlink": (
            "Grep",
            {"pattern": "outside-content", "path": str(root / "link"), "output_mode": "content"},
        ),
    }
    allowed: dict[str, tuple[str, dict[str, Any]]] = {
        "read inside": ("Read", {"file_path": str(root / "inside.txt")}),
        "grep inside": ("Grep", {"pattern": "inside-content", "path": str(root), "output_mode": "content"}),
    }
    jobs = {
        name: submit_tool(client, root, tool, args, f"{unique}-{i}")
        for i, (name, (tool, args)) in enumerate({**cases, **allowed}.items())
    }
    records = {name: client.wait(job_id, timeout=120, poll_s=0.2) for name, job_id in jobs.items()}

    # The tools work in the root: the same calls inside it see the file (so a denial is the hook's doing).
    for name in allowed:
        record = records[name]
        assert record.status == "succeeded", (name, record.error)
        result = tool_result(client, record.id)
        assert not result["is_error"] and f"inside-content-{unique}" in str(result["text"]), (name, result)

    for name, (tool, _) in cases.items():
        record = records[name]
        assert record.status == "succeeded", (name, record.error)  # a denied tool call does not fail the job
        result = tool_result(client, record.id)
        assert result["is_error"], (name, result)
        assert DENIED in str(result["text"]), (name, result)
        calls = [e.data for e in client.events(record.id) if e.type == "tool_call"]
        assert [c["tool"] for c in calls] == [tool], (name, calls)
        assert record.result is not None and DENIED in (record.result.text or ""), (name, record.result)
        stored = everything_stored(client, record)
        assert f"outside-content-{unique}" not in stored, name
