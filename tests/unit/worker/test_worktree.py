"""A coding job's worktree (worker/workspace/worktree.py) on a real git repository, no Redis: made from `ref`, its
change committed and diffed, the patch capped, the job's author and message, and a run that rewrites its worktree's
`.git` file never steering the worker's git elsewhere."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.worker.background.notifier import webhook_payload
from claudeq.worker.workspace.worktree import WorkspaceProblem, collect, prepare, remove
from claudeq.workspaces import WorkspaceSpec


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    _git(path, "add", "a.txt")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return path


def _record(repo: Path, job_id: str = "job-1", **spec: object) -> JobRecord:
    fields = {"workspace": WorkspaceSpec(repo=str(repo)), **spec}
    return JobRecord(
        id=job_id,
        spec=JobSpec(prompt="Fix it\nmore words", **fields),  # type: ignore[arg-type]
        status="running",
        created_at=utcnow(),
    )


def test_a_change_is_committed_on_the_job_branch_with_its_author_and_message(repo: Path, tmp_path: Path) -> None:
    record = _record(repo, metadata={"commit_author": "Ada <ada@example.org>"})
    tree = prepare(record, tmp_path / "wt" / record.id)
    (tree.path / "a.txt").write_text("one\ntwo\n")
    (tree.path / "b.txt").write_text("new\n")
    change = collect(tree, record.spec, record.id, 1_000_000)
    assert (change.files, change.insertions, change.deletions) == (2, 2, 0)
    assert change.branch == "claudeq/job-1" and change.commit == _git(repo, "rev-parse", "claudeq/job-1").strip()
    assert _git(repo, "log", "-1", "--format=%an <%ae>|%s", change.branch).strip() == "Ada <ada@example.org>|Fix it"
    assert change.patch is not None and "+two" in change.patch and "+new" in change.patch
    remove(tree)
    assert not tree.path.exists() and _git(repo, "worktree", "list").count("\n") == 1


def test_a_patch_past_the_cap_keeps_the_stat_and_the_branch_only(repo: Path, tmp_path: Path) -> None:
    record = _record(repo)
    tree = prepare(record, tmp_path / "wt" / record.id)
    (tree.path / "big.txt").write_text("x\n" * 1000)
    change = collect(tree, record.spec, record.id, 100)
    assert (change.truncated, change.patch, change.insertions) == (True, None, 1000)
    assert _git(repo, "show", f"{change.branch}:big.txt") == "x\n" * 1000


def test_a_rewritten_git_file_in_the_worktree_does_not_move_the_commit(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q", "-b", "main")
    record = _record(repo)
    tree = prepare(record, tmp_path / "wt" / record.id)
    (tree.path / ".git").write_text(f"gitdir: {other / '.git'}\n")  # what a run could write
    (tree.path / "c.txt").write_text("c\n")
    change = collect(tree, record.spec, record.id, 1_000_000)
    assert _git(repo, "show", f"{change.branch}:c.txt") == "c\n"
    assert subprocess.run(["git", "-C", str(other), "rev-parse", "HEAD"], capture_output=True).returncode != 0


def test_an_existing_branch_is_refused_unless_the_job_continues_it(repo: Path, tmp_path: Path) -> None:
    _git(repo, "branch", "claudeq/job-2")
    with pytest.raises(WorkspaceProblem) as refused:
        prepare(_record(repo, "job-2"), tmp_path / "wt" / "job-2")
    assert str(refused.value) == f"workspace.branch: branch 'claudeq/job-2' exists in {repo} and is not this job's"
    turn = _record(repo, "job-3", conversation="c1", workspace=WorkspaceSpec(repo=str(repo), branch="claudeq/job-2"))
    assert prepare(turn, tmp_path / "wt" / "job-3").branch == "claudeq/job-2"  # a conversation continues it


def test_an_unknown_ref_is_refused(repo: Path, tmp_path: Path) -> None:
    bad = _record(repo, "job-4", workspace=WorkspaceSpec(repo=str(repo), ref="nope"))
    with pytest.raises(WorkspaceProblem) as refused:
        prepare(bad, tmp_path / "wt" / "job-4")
    assert str(refused.value) == f"workspace.ref: 'nope' names no commit in {repo}"


def test_a_webhook_body_carries_the_change_with_its_patch(repo: Path, tmp_path: Path) -> None:
    record = _record(repo, "job-5")
    tree = prepare(record, tmp_path / "wt" / record.id)
    (tree.path / "a.txt").write_text("changed\n")
    record = record.model_copy(update={"workspace": collect(tree, record.spec, record.id, 1_000_000)})
    for body in ("record", "result"):
        sent = webhook_payload(record, body)["workspace"]
        assert sent["branch"] == "claudeq/job-5" and "+changed" in sent["patch"] and "patch_z" not in sent


def test_a_bare_repository_gets_worktrees_too(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    record = _record(bare, "job-6")
    tree = prepare(record, tmp_path / "wt" / record.id)
    (tree.path / "d.txt").write_text("d\n")
    change = collect(tree, record.spec, record.id, 1_000_000)
    assert _git(bare, "show", f"{change.branch}:d.txt") == "d\n" and change.files == 1
    remove(tree)
    assert _git(bare, "worktree", "list").count("\n") == 1


def test_a_lock_file_that_stays_fails_the_worktree_naming_it(repo: Path, tmp_path: Path) -> None:
    lock = repo / ".git" / "refs" / "heads" / "claudeq" / "job-7.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # another git holds the branch's ref (here: for good)
    with pytest.raises(WorkspaceProblem) as refused:
        prepare(_record(repo, "job-7"), tmp_path / "wt" / "job-7")
    assert str(refused.value).startswith("workspace: the worktree could not be made") and "job-7.lock" in str(
        refused.value
    )
    lock.unlink()  # released: the next attempt makes it
    assert prepare(_record(repo, "job-7"), tmp_path / "wt" / "job-7").branch == "claudeq/job-7"
