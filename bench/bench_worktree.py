"""What a coding job's worktree costs (docs/jobs.md#coding-jobs): on a repository of `--files` files (~5,000), the
worker's git work per job — make the worktree, commit and diff a small edit, remove it — against a short job's run
time measured in the same run (the real CLI through the SDK, one reply from the simulator). Prints the median of
each step over `--rounds` jobs and the ratio worktree / run, as JSON.

    .venv/bin/python -m bench.bench_worktree [--files 5000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.run.launcher import bundled_cli
from claudeq.worker.workspace.worktree import collect, prepare, remove
from claudeq.workspaces import WorkspaceSpec
from tests.support.worker_proc import SimAccount

PER_FOLDER = 100


def make_repo(path: Path, files: int) -> None:
    """A repository of `files` small text files, 100 a folder, in one commit on `main`."""
    path.mkdir()
    for n in range(files):
        folder = path / f"pkg{n // PER_FOLDER:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{n % PER_FOLDER:03d}.py").write_text(f'"""Module {n}."""\n\nVALUE = {n}\n' + "x = 1\n" * 20)
    git = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)


def worktree_rounds(repo: Path, base: Path, rounds: int) -> dict[str, list[float]]:
    """Each step's seconds per job: make, commit and diff (after editing three files), remove."""
    steps: dict[str, list[float]] = {"make": [], "commit_diff": [], "remove": []}
    for n in range(rounds):
        job_id = uuid.uuid4().hex
        spec = JobSpec(prompt=f"bench edit {n}", workspace=WorkspaceSpec(repo=str(repo)))
        record = JobRecord(id=job_id, spec=spec, status="running", created_at=utcnow())
        t0 = time.perf_counter()
        tree = prepare(record, base / job_id)
        t1 = time.perf_counter()
        for k in range(3):
            target = tree.path / f"pkg{k:03d}" / "mod000.py"
            target.write_text(target.read_text() + f"EDIT = {n}\n")
        t2 = time.perf_counter()
        change = collect(tree, spec, job_id, 1_000_000)
        t3 = time.perf_counter()
        remove(tree)
        t4 = time.perf_counter()
        assert change.files == 3 and change.commit is not None
        steps["make"].append(t1 - t0)
        steps["commit_diff"].append(t3 - t2)
        steps["remove"].append(t4 - t3)
    return steps


async def run_times(rounds: int, account: SimAccount, base_url: str, root: Path) -> list[float]:
    """A short job's run time (s), one after another: the CLI started, one reply, its result."""
    times = []
    for n in range(rounds):
        config_dir = root / f"config-{n}"
        config_dir.mkdir()
        options = ClaudeAgentOptions(
            cli_path=str(bundled_cli()),
            tools=[],
            setting_sources=[],
            env={
                "ANTHROPIC_BASE_URL": base_url,
                "CLAUDE_CODE_OAUTH_TOKEN": account.token_value,
                "ANTHROPIC_API_KEY": "",
                "CLAUDE_CONFIG_DIR": str(config_dir),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
            },
        )
        start = time.perf_counter()
        ok = False
        async for message in query(prompt=f'[[sim: text "ok"]] short job {n}', options=options):
            if isinstance(message, ResultMessage):
                ok = not message.is_error
        if not ok:
            raise RuntimeError(f"job {n} failed")
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    account = SimAccount("bench")
    with tempfile.TemporaryDirectory(prefix="cq-bench-worktree-") as tmp:
        root = Path(tmp)
        make_repo(root / "repo", args.files)
        steps = worktree_rounds(root / "repo", root / "worktrees", args.rounds)
        with SimulatorServer({"accounts": [{"name": account.name, "token": account.token_value}]}) as sim:
            runs = asyncio.run(run_times(args.rounds, account, sim.base_url, root))
    medians = {name: statistics.median(values) for name, values in steps.items()}
    per_job = sum(medians.values())
    run = statistics.median(runs)
    print(
        json.dumps(
            {
                "files": args.files,
                "rounds": args.rounds,
                "worktree_s": {name: round(value, 4) for name, value in medians.items()},
                "worktree_per_job_s": round(per_job, 4),
                "job_run_s": round(run, 4),
                "ratio_worktree_to_run": round(per_job / run, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
