"""Workspace confinement with the real CLI: file tools reaching outside the workspace roots are denied.

Two layers keep file tools inside the roots (docs/workers.md#security-defaults). The PreToolUse hook
(worker/run/options.py) denies a path that resolves outside them, read the way the CLI reads it (`~`, `~user`, `..`,
symlinks): the tools are in `allowed_tools`, so the CLI asks nobody else. And a root worker (as this suite runs) runs
every run with file tools under a uid of its own, so whatever the hook misjudged meets the kernel's permission check:
files readable by root alone stay unread. Here the simulator's tool directives make the real CLI call each file tool
with every path form; the tool results, the events and the job record say it was refused, and nothing of the outside
files reaches the job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.worker.run import procs
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

DENIED = "outside the workspace roots"
WORKSPACE_GID = 62501  # the runs' shared group (outside the default run uid range 61000-61999)
FILE_TOOLS = ["Read", "Glob", "Grep", "Edit", "Write", "NotebookEdit"]


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory any uid may enter (pytest's tmp_path is under a 0700 directory): runs, workspace, outside."""
    with open_base("cqt-workspace-") as path:
        yield path


@pytest.fixture
def dirs(base: Path, unique: str) -> tuple[Path, Path]:
    """(workspace root, a folder outside it readable by root alone); the root holds a file and a symlink pointing
    out. The worker's home holds a root-only file too (what `~` is to a CLI of the worker's uid)."""
    root, outside, home = base / "ws", base / "outside", base / "home"
    group_workspace(root, WORKSPACE_GID)
    outside.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    (root / "inside.txt").write_text(f"inside-content-{unique}\n")
    (root / "inside.txt").chmod(0o660)
    (root / "link").symlink_to(outside, target_is_directory=True)
    for folder in (outside, home):
        secret = folder / "secret.txt"
        secret.write_text(f"outside-content-{unique}\n")
        secret.chmod(0o600)
    return root, outside


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, base: Path, dirs: tuple[Path, Path]) -> Settings:
    root, _ = dirs
    policy = WorkerPolicy(allowed_tools=FILE_TOOLS, workspace_roots=[root], run_groups=[WORKSPACE_GID])
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        run_root=base / "runs",
        policy=policy,
        **{**FAST_E2E, "concurrency": 4},
    )


def submit_tool(client: Client, root: Path, tool: str, tool_input: dict[str, Any], nonce: str) -> str:
    prompt = f"[[sim: tool {tool} {json.dumps(tool_input)}]] use {tool} ({nonce})"
    return client.submit(prompt=prompt, tools="read-only", cwd=str(root)).id


def submit_calls(client: Client, root: Path, tool: str, inputs: list[dict[str, Any]], nonce: str) -> str:
    """One job calling `tool` once per input, in order (one simulator directive each)."""
    directives = " ".join(f"[[sim: tool {tool} {json.dumps(i)}]]" for i in inputs)
    return client.submit(prompt=f"{directives} use {tool} ({nonce})", tools=[tool], cwd=str(root)).id


def tool_result(client: Client, job_id: str) -> dict[str, Any]:
    results = [e.data for e in client.events(job_id) if e.type == "tool_result"]
    assert len(results) == 1, results
    return results[0]


def everything_stored(client: Client, record: JobRecord) -> str:
    return json.dumps(record.public()) + json.dumps([e.model_dump(mode="json") for e in client.events(record.id)])


def test_file_tools_outside_the_roots_are_denied_with_the_real_cli(
    client: Client, workers: WorkerFactory, dirs: tuple[Path, Path], unique: str, base: Path
) -> None:
    root, outside = dirs
    workers(extra_env={"HOME": str(base / "home")})
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


def _path_forms(root: Path, name: str) -> dict[str, str]:
    """Every way a path argument may name `name` in the folder outside the roots (or that folder: name '')."""
    tail = f"/{name}" if name else ""
    return {
        "absolute": f"{root.parent}/outside{tail}",
        "relative ..": f"../outside{tail}",
        "absolute with ..": f"{root}/../outside{tail}",
        "symlink out": f"{root}/link{tail}",
        "~": f"~{tail}",  # the CLI's $HOME: the worker's home (its uid) or the run directory (a run uid)
        "~/.. from the run directory": f"~/../../outside{tail}",
        "~/.. from the worker's home": f"~/../outside{tail}",
        "~root": f"~root{tail}",
        "~unknown-user": f"~no-such-user-cqt{tail}",
    }


def _table(root: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per file tool: (case, input) pairs, each one reaching for the root-only files outside the roots."""
    files = _path_forms(root, "secret.txt")
    folders = _path_forms(root, "")
    fresh = _path_forms(root, "new.txt")
    climbing = ["../outside/*", "{..,x}/outside/*", "~/*", "~/../outside/*", f"{root.parent}/outside/*", "**/../../*"]
    return {
        "Read": [(case, {"file_path": path}) for case, path in files.items()],
        "Glob": [(case, {"pattern": "*", "path": path}) for case, path in folders.items()]
        + [(f"pattern {p}", {"pattern": p}) for p in climbing],
        "Grep": [
            (case, {"pattern": "outside-content", "path": path, "output_mode": "content"})
            for case, path in {**files, **{f"{k} (folder)": v for k, v in folders.items()}}.items()
        ]
        + [(f"glob {p}", {"pattern": "outside-content", "glob": p, "output_mode": "content"}) for p in climbing],
        "Edit": [
            (case, {"file_path": path, "old_string": "outside-content", "new_string": "pwned"})
            for case, path in files.items()
        ],
        "Write": [(case, {"file_path": path, "content": "pwned"}) for case, path in fresh.items()],
        "NotebookEdit": [
            (case, {"notebook_path": path.replace("new.txt", "nb.ipynb"), "new_source": "pwned", "cell_id": "0"})
            for case, path in fresh.items()
        ],
    }


def test_every_file_tool_through_every_path_form_is_refused_outside_the_roots(
    client: Client, workers: WorkerFactory, dirs: tuple[Path, Path], unique: str, base: Path
) -> None:
    """The table: each file tool, each path form (relative, absolute, `~`, `~/..`, `~user`, `..`, a symlink out,
    glob patterns that climb) against files readable by root alone, outside the roots. Every call is refused;
    nothing outside is read, changed or created; and the same tools work inside the root."""
    root, outside = dirs
    workers(extra_env={"HOME": str(base / "home")})
    table = _table(root)
    jobs = {
        tool: submit_calls(client, root, tool, [i for _, i in calls], f"{unique}-{tool}")
        for tool, calls in table.items()
    }
    inside = {
        "Read": {"file_path": str(root / "inside.txt")},
        "Glob": {"pattern": "*.txt"},
        "Grep": {"pattern": "inside-content", "output_mode": "content"},
        "Write": {"file_path": str(root / "written.txt"), "content": f"written-{unique}"},
    }
    controls = {tool: submit_calls(client, root, tool, [i], f"{unique}-in-{tool}") for tool, i in inside.items()}
    before = {p: p.read_bytes() for folder in (outside, base / "home") for p in folder.iterdir()}

    for tool, job_id in jobs.items():
        record = client.wait(job_id, timeout=180, poll_s=0.2)
        assert record.status == "succeeded", (tool, record.error)
        results = [e.data for e in client.events(job_id) if e.type == "tool_result"]
        assert len(results) == len(table[tool]), (tool, results)
        for (case, _), result in zip(table[tool], results, strict=True):
            text = str(result["text"])
            print(f"{tool:12} {case:40} {text[:150]!r}")
            assert f"outside-content-{unique}" not in text, (tool, case, text)
            if not result["is_error"]:
                # The CLI expands `~` alone, not `~user`: a file tool reads `~root/x` as a name under the cwd.
                assert case.startswith("~") and case not in ("~", "~/.. from the run directory"), (tool, case, text)
                assert any(p.name.startswith("~") for p in root.iterdir()), (tool, case, text)
        assert f"outside-content-{unique}" not in everything_stored(client, record), tool

    for tool, job_id in controls.items():
        record = client.wait(job_id, timeout=120, poll_s=0.2)
        assert record.status == "succeeded", (tool, record.error)
        (result,) = [e.data for e in client.events(job_id) if e.type == "tool_result"]
        assert not result["is_error"], (tool, result)
    assert (root / "written.txt").read_text() == f"written-{unique}"
    after = {p: p.read_bytes() for folder in (outside, base / "home") for p in folder.iterdir()}
    assert after == before  # nothing changed, nothing created outside


def test_a_read_only_run_on_a_root_worker_runs_under_a_uid_of_its_own(
    client: Client, workers: WorkerFactory, dirs: tuple[Path, Path], settings: Settings, unique: str
) -> None:
    """The kernel's layer: the CLI of a run offered only Read, Glob and Grep runs under a uid of the run range, so a
    path the hook misjudged still meets the permission check of a uid that owns nothing outside its run."""
    root, _ = dirs
    workers()
    handle = client.submit(prompt=f"[[sim: delay 4]] look ({unique})", tools="read-only", cwd=str(root))
    first, last = settings.policy.run_uids
    uids: set[int] = set()
    deadline = time.monotonic() + 60
    while not uids and time.monotonic() < deadline:
        for pid in procs.job_pids(handle.id):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if not program.endswith(b"/claude"):
                continue  # the wrapper, before it drops to the run's uid
            uids.update(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
        time.sleep(0.1)
    assert client.wait(handle.id, timeout=120, poll_s=0.2).status == "succeeded"
    assert uids and all(first <= uid <= last for uid in uids), uids
