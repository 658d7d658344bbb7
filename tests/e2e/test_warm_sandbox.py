"""Warm CLIs in a sandbox of their own: a sandboxed job with tools reuses a warm CLI of exactly its options and its
sandbox's view, and still sees nothing outside its roots; jobs whose view would differ never share a CLI.

Real worker processes — once as root (a warm CLI holds a run uid of its own for its life), once as a worker that is
not root (its CLIs run under its uid) — the real CLI in bubblewrap, the simulator scripting the tool calls
(docs/architecture.md#warm-clis). The workspace root holds
two workspaces, `a` and `b`: the hook allows either to any job (both are under the root), so only the sandbox, which
shows a job its own `cwd` alone, keeps a job in `a` from `b`'s files — and a CLI kept from a job in `a` must never
serve a job whose `cwd` leads to `b`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.producer.client import Client
from claudeq.worker.run import procs
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.run_dirs import group_workspace, non_root_worker, open_base
from tests.support.worker_proc import FAST_E2E, SimAccount, write_accounts_toml

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62508  # the workspace's group (outside the default run uid range 61000-61999)
WORKER_UID = 62991  # the worker that is not root (outside the run uids and the groups)


@pytest.fixture(params=["root", "non-root"])
def worker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Place:
    base: Path
    root: Path  # the workspace root
    a: Path
    b: Path
    outside: Path  # world-readable, outside the root
    runs: Path
    unique: str

    def secret(self, where: str) -> str:
        return f"content-of-{where}-{self.unique}"


@pytest.fixture
def place(unique: str, worker_kind: str) -> Iterator[Place]:
    owner = 0 if worker_kind == "root" else WORKER_UID
    with open_base("cqt-warm-sandbox-") as base:
        root = group_workspace(base / "ws", WORKSPACE_GID)
        spot = Place(base, root, root / "a", root / "b", base / "outside", base / "runs", unique)
        for name, ws in (("a", spot.a), ("b", spot.b)):
            group_workspace(ws, WORKSPACE_GID)
            (ws / "file.txt").write_text(spot.secret(name) + "\n")
            os.chown(ws / "file.txt", 0, WORKSPACE_GID)
            (ws / "file.txt").chmod(0o640)
        spot.outside.mkdir(mode=0o755)
        (spot.outside / "world.txt").write_text(spot.secret("outside") + "\n")
        (spot.outside / "world.txt").chmod(0o644)
        spot.runs.mkdir(mode=0o711)
        os.chown(spot.runs, owner, owner)  # the worker makes its runs' directories there
        yield spot


@pytest.fixture
def accounts_file(place: Place, accounts: list[SimAccount], simulator: Any) -> Path:
    path = write_accounts_toml(place.base / "accounts.toml", accounts, simulator.base_url)
    path.chmod(0o644)  # the worker is not root
    return path


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, place: Place) -> Settings:
    policy = WorkerPolicy(
        allowed_tools=["Read", "Glob", "Grep", "LS"], workspace_roots=[place.root], run_groups=[WORKSPACE_GID]
    )
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        run_root=place.runs,
        policy=policy,
        **{**FAST_E2E, "concurrency": 2, "warm_clients": 4},
    )


@pytest.fixture
def worker(workers: WorkerFactory, place: Place, worker_kind: str) -> Any:
    if worker_kind == "root":
        return workers()
    env, prefix = non_root_worker(place.base, WORKER_UID, WORKSPACE_GID)
    return workers(extra_env=env, prefix=prefix)


def warm_sandboxes(runs: Path) -> dict[str, list[int]]:
    """Live warm CLIs of this test's worker, by run id: the processes of each (its sandbox's and the CLI)."""
    found: dict[str, list[int]] = {}
    for pid in procs.all_job_pids():
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        run_id = env.get(b"CLAUDEQ_RUN_ID", b"").decode()
        config = env.get(b"CLAUDE_CONFIG_DIR", b"").decode(errors="replace")
        if run_id.startswith("warm.") and config.startswith(str(runs)) and procs.alive(pid):
            found.setdefault(run_id, []).append(pid)
    return found


def programs(pids: list[int]) -> dict[int, str]:
    """Each live process's program name."""
    names = {}
    for pid in pids:
        try:
            names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    return names


def core(pids: list[int]) -> list[int]:
    """The CLI and its sandbox, without the forwarder's per-connection processes."""
    return sorted(pid for pid, name in programs(pids).items() if name != "socat")


def run_job(client: Client, cwd: Path, reads: list[str]) -> tuple[bool, list[str]]:
    """A read-only job in `cwd` that reads each of `reads`; (whether it ran on a warm CLI, each tool result's text)."""
    calls = " ".join(f"[[sim: tool Read {json.dumps({'file_path': path})}]]" for path in reads)
    job = client.submit(prompt=f"{calls} read", tools="read-only", cwd=str(cwd))
    record = client.wait(job.id, timeout=120, poll_s=0.1)
    assert record.status == "succeeded", record.error
    events = list(client.events(job.id))
    [started] = [e for e in events if e.type == "run_started"]
    results = [str(e.data["text"]) for e in events if e.type == "tool_result"]
    assert len(results) == len(reads), [e.model_dump(mode="json") for e in events]
    return bool(started.data.get("warm")), results


def test_a_sandboxed_job_reuses_a_warm_cli_in_its_sandbox_and_still_sees_only_its_cwd(
    client: Client, worker: Any, place: Place, worker_kind: str
) -> None:
    reads = [str(place.a / "file.txt"), str(place.b / "file.txt"), str(place.outside / "world.txt")]
    warm, results = run_job(client, place.a, reads)
    assert not warm
    first = run_until(lambda: warm_sandboxes(place.runs), 15, 0.1, what="an idle warm CLI")
    assert len(first) == 1
    [(cli, pids)] = first.items()
    names = sorted(programs(pids).values())
    assert names.count("bwrap") == 2 and "socat" in names and "claude" in names, names  # it runs in its sandbox
    [cli_pid] = [pid for pid, name in programs(pids).items() if name == "claude"]
    uid = int(Path(f"/proc/{cli_pid}/status").read_text().split("\nUid:")[1].split()[0])
    if worker_kind == "root":  # a run uid it holds for its life, never root
        low, high = worker.settings.policy.run_uids
        assert low <= uid <= high, uid
    else:
        assert uid == WORKER_UID
    for n in range(3):
        warm, results = run_job(client, place.a, reads)
        assert warm, f"job {n + 2} did not run on a warm CLI"
        assert place.secret("a") in results[0], results[0]
        # `b` is under the workspace root, so the hook lets the Read through: the sandbox shows it nothing.
        assert place.secret("b") not in results[1] and place.secret("outside") not in results[2], results
        # One CLI served every job: the same run id, the same processes (none started, none left besides its own).
        now = run_until(lambda: warm_sandboxes(place.runs) or None, 15, 0.1, what="the warm CLI idle again")
        assert list(now) == [cli], now
        assert core(now[cli]) == core(pids), (now, pids)


def test_jobs_whose_cwd_leads_elsewhere_never_share_a_warm_cli(client: Client, worker: Any, place: Place) -> None:
    in_a = [str(place.a / "file.txt"), str(place.b / "file.txt")]
    warm, results = run_job(client, place.a, in_a)
    assert not warm and place.secret("a") in results[0] and place.secret("b") not in results[1], results
    run_until(lambda: len(warm_sandboxes(place.runs)) == 1, 15, 0.1, what="a's warm CLI idle")

    # Another cwd: a CLI of its own, whose sandbox shows `b` and not `a`.
    warm, results = run_job(client, place.b, [str(place.b / "file.txt"), str(place.a / "file.txt")])
    assert not warm and place.secret("b") in results[0] and place.secret("a") not in results[1], results
    run_until(lambda: len(warm_sandboxes(place.runs)) == 2, 15, 0.1, what="two warm CLIs idle")

    # The same cwd path, led elsewhere: a symlink pointed from `a` to `b` between two jobs. The CLI kept from the
    # first job still shows `a` there; the second job must not get it.
    link = place.root / "current"
    link.symlink_to(place.a)
    warm, results = run_job(client, link, [str(link / "file.txt")])
    assert not warm and place.secret("a") in results[0], results
    run_until(lambda: len(warm_sandboxes(place.runs)) == 3, 15, 0.1, what="three warm CLIs")
    link.unlink()
    link.symlink_to(place.b)
    warm, results = run_job(client, link, [str(link / "file.txt"), str(place.a / "file.txt")])
    assert place.secret("b") in results[0] and place.secret("a") not in results[1], results
    assert not warm

    # A job like the first runs warm on the first job's CLI.
    warm, results = run_job(client, place.a, in_a)
    assert warm and place.secret("a") in results[0] and place.secret("b") not in results[1], results
