"""What submit tells of a job's repository (claudeq/git_repo.py), on real git repositories: a work tree's top or a
bare repository is one; a folder inside one, or a plain folder, is not; a ref must name a commit; a branch that exists
is refused unless the job continues it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from claudeq.config.settings import WorkerPolicy
from claudeq.git_repo import git_dir, workspace_problems
from claudeq.workspaces import WorkspaceSpec


def _git(*args: str) -> None:
    subprocess.run(["git", *args], capture_output=True, check=True)


def _repo(path: Path) -> Path:
    (path / "sub").mkdir(parents=True)
    _git("-C", str(path), "init", "-q", "-b", "main")
    (path / "sub" / "f.txt").write_text("f\n")
    _git("-C", str(path), "add", "-A")
    _git("-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return path


def test_a_work_tree_top_or_a_bare_repository_is_a_repository(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    _git("clone", "-q", "--bare", str(repo), str(tmp_path / "bare.git"))
    (tmp_path / "plain").mkdir()
    assert git_dir(repo) == repo / ".git"
    assert git_dir(tmp_path / "bare.git") == tmp_path / "bare.git"
    assert git_dir(repo / "sub") is None and git_dir(tmp_path / "plain") is None


def test_submit_names_the_field_and_the_reason(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "root" / "repo")
    policy = WorkerPolicy(workspace_roots=[tmp_path / "root"])

    def problems(**fields: object) -> list[tuple[str, str]]:
        spec = WorkspaceSpec(repo=str(repo), **fields)  # type: ignore[arg-type]
        return workspace_problems(spec, policy, conversation=None, resume=None, tenant="default")

    assert problems() == []
    assert problems(ref="nope") == [("workspace.ref", f"'nope' names no commit in {repo}")]
    _git("-C", str(repo), "branch", "taken")
    assert problems(branch="taken") == [
        ("workspace.branch", f"branch 'taken' already exists in {repo} and is not this job's")
    ]
    spec = WorkspaceSpec(repo=str(repo), branch="taken")
    assert workspace_problems(spec, policy, conversation="c", resume=None, tenant="default") == []
    outside = WorkspaceSpec(repo=str(tmp_path / "elsewhere"))
    [(field, reason)] = workspace_problems(outside, policy, conversation=None, resume=None, tenant="default")
    assert field == "workspace.repo" and "outside the workspace roots" in reason
