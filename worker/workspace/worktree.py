"""One attempt's git worktree: `prepare` before the run, `collect` after it (any outcome), `remove` when done.

The worker runs git on a worktree only through the git directory it made it with (`--git-dir`, `--work-tree`):
a run can rewrite its worktree's `.git` file, never the repository's own git directory, which its sandbox does not
show (docs/jobs.md#coding-jobs).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from claudeq.git_repo import (
    GitFailed,
    branch_exists,
    commit_of,
    continues,
    git,
    git_dir,
    job_branch,
    root_of,
    valid_branch,
)
from claudeq.models import JobRecord, JobSpec
from claudeq.workspaces import ChangeStat, WorkspaceChange, pack_patch

from ...config.settings import Settings

#: The folder of a workspace root that holds its coding jobs' worktrees when CLAUDEQ_WORKTREE_DIR is not set.
WORKTREES_FOLDER = ".claudeq-worktrees"
#: The file in a worktree's git directory (the repository's side) naming the job that made it.
JOB_FILE = "claudeq-job"
#: How many times making a worktree is tried while a lock file of the repository is held, and the first wait (s).
ADD_TRIES = 5
LOCK_WAIT_S = 0.2
#: An author a job may name in `metadata.commit_author`.
AUTHOR = re.compile(r"^[^<>\n]{1,100} <[^<>\s]{1,200}>$")


class WorkspaceProblem(Exception):
    """The job's workspace cannot be made: the message says which part (repo, ref, branch, worktree)."""


@dataclass(frozen=True)
class Worktree:
    """A worktree made for one attempt: where, on which branch, from which commit, and its git directory."""

    repo: Path
    path: Path
    git_dir: Path
    branch: str
    ref: str
    ref_commit: str
    base: str


def worktrees_dir(spec: JobSpec, settings: Settings) -> Path:
    """Where the job's worktree goes: CLAUDEQ_WORKTREE_DIR, or `.claudeq-worktrees` in the repository's root."""
    assert spec.workspace is not None
    if settings.worktree_dir is not None:
        return settings.worktree_dir
    root = root_of(Path(spec.workspace.repo), settings.policy)
    if root is None:
        raise WorkspaceProblem(f"workspace.repo: {spec.workspace.repo} is outside the workspace roots")
    return root / WORKTREES_FOLDER


def worktree_path(record: JobRecord, settings: Settings) -> Path:
    """The job's worktree: one per job, one per conversation (its turns run one at a time, in one place, so a
    resumed session finds its transcript under the same directory)."""
    spec = record.spec
    if spec.conversation:
        name = "c-" + hashlib.sha256(f"{spec.tenant}\0{spec.conversation}".encode()).hexdigest()[:16]
    else:
        name = record.id
    return worktrees_dir(spec, settings) / name


def prepare(record: JobRecord, path: Path) -> Worktree:
    """Make the attempt's worktree at `path` (blocking): a first attempt starts from `ref` (a conversation's turn
    or a resumed job from its branch, when that exists); a retry from where the job's first attempt started."""
    spec = record.spec
    assert spec.workspace is not None
    workspace = spec.workspace
    repo = Path(workspace.repo)
    common = git_dir(repo)
    if common is None:
        raise WorkspaceProblem(f"workspace.repo: {repo} is not a git repository")
    branch = job_branch(workspace, record.id, spec.tenant, spec.conversation)
    assert branch is not None
    if not valid_branch(repo, branch):
        raise WorkspaceProblem(f"workspace.branch: {branch!r} is not a valid branch name")
    if record.workspace is not None:  # a retry: clean, from where the job began
        ref_commit, base = record.workspace.ref_commit, record.workspace.base
    else:
        found = commit_of(repo, workspace.ref)
        if found is None:
            raise WorkspaceProblem(f"workspace.ref: {workspace.ref!r} names no commit in {repo}")
        ref_commit = base = found
        if branch_exists(repo, branch):
            if not continues(spec.conversation, spec.resume):
                raise WorkspaceProblem(f"workspace.branch: branch {branch!r} exists in {repo} and is not this job's")
            base = commit_of(repo, f"refs/heads/{branch}") or found
    _drop(repo, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o711)  # runs may enter it (to their own worktree), not list it
    try:
        _add(repo, path, branch, base)
        own = Path(git("-C", str(path), "rev-parse", "--absolute-git-dir").strip())
    except GitFailed as exc:
        _drop(repo, path)
        raise WorkspaceProblem(f"workspace: the worktree could not be made: {exc}") from None
    if own.parent.parent != common:
        _drop(repo, path)
        raise WorkspaceProblem(f"workspace: the worktree's git directory {own} is not under {common}")
    (own / JOB_FILE).write_text(record.id)  # whose it is, for `claudeq workspaces prune`
    return Worktree(repo, path, own, branch, workspace.ref, ref_commit, base)


def _add(repo: Path, path: Path, branch: str, base: str) -> None:
    """`git worktree add -B`, tried again while another job's git holds one of the repository's lock files (jobs
    on one repository make their worktrees at once)."""
    for attempt in range(ADD_TRIES):
        try:
            git("-C", str(repo), "worktree", "add", "--force", "--quiet", "-B", branch, str(path), base)
            return
        except GitFailed as exc:
            if ".lock" not in exc.said or attempt == ADD_TRIES - 1:
                raise
            _drop(repo, path)
            time.sleep(LOCK_WAIT_S * (attempt + 1))


def collect(
    tree: Worktree,
    spec: JobSpec,
    job_id: str,
    patch_max_bytes: int,
    overflow: Callable[[bytes], bool] | None = None,
) -> WorkspaceChange:
    """Commit what the run changed on the job's branch and diff it against `ref` (blocking). A patch over
    `patch_max_bytes` goes to `overflow` (zlib-compressed; True: kept there, the transcript archive) if given."""
    run = _Git(tree)
    run("add", "--all", "--", ".")
    if not run.succeeds("diff", "--cached", "--quiet"):  # something staged
        author = spec.metadata.get("commit_author")
        message = spec.metadata.get("commit_message")
        subject = message if isinstance(message, str) and message.strip() else _first_line(spec.prompt)
        who = author if isinstance(author, str) and AUTHOR.match(author) else f"claudeq <{job_id}@claudeq.invalid>"
        run("commit", "--quiet", "--no-verify", "--allow-empty-message", f"--author={who}", "-m", subject)
    head = run("rev-parse", "HEAD").strip()
    files = insertions = deletions = 0
    for line in run("diff", "--numstat", tree.ref_commit, head).splitlines():
        added, removed, _ = line.split("\t", 2)
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
    patch = run("diff", "--binary", tree.ref_commit, head)
    fits = len(patch.encode()) <= patch_max_bytes
    archived = not fits and overflow is not None and overflow(zlib.compress(patch.encode(), 6))
    return WorkspaceChange(
        files=files,
        insertions=insertions,
        deletions=deletions,
        commit=head if head != tree.base else None,
        branch=tree.branch,
        ref=tree.ref,
        ref_commit=tree.ref_commit,
        base=tree.base,
        patch_z=pack_patch(patch) if fits and patch else None,
        truncated=not fits,
        patch_archived=archived,
        worktree=str(tree.path) if spec.workspace is not None and spec.workspace.keep else None,
    )


def stat_of(change: WorkspaceChange) -> ChangeStat:
    """The attempt's part of a change (kept in its attempt)."""
    return ChangeStat(
        files=change.files, insertions=change.insertions, deletions=change.deletions, commit=change.commit
    )


def remove(tree: Worktree) -> None:
    """Remove the worktree (its branch stays) (blocking)."""
    _drop(tree.repo, tree.path)


@dataclass(frozen=True)
class Kept:
    """A worktree left in place (a job's `keep`, or a worker that died mid-run)."""

    path: Path
    repo: Path
    job_id: str | None  # the job that made it last, when it says


def kept(settings: Settings) -> list[Kept]:
    """Worktrees under the worktree folders of these settings (CLAUDEQ_WORKTREE_DIR, each root's
    `.claudeq-worktrees`), with their repository and job."""
    folders = [settings.worktree_dir] if settings.worktree_dir else []
    folders += [root / WORKTREES_FOLDER for root in settings.policy.workspace_roots]
    found: list[Kept] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            mine = _owned(path)
            if mine is not None:
                repo, job_id = mine
                found.append(Kept(path, repo, job_id))
    return found


def drop(tree: Kept) -> None:
    """Remove a kept worktree (its branch stays)."""
    _drop(tree.repo, tree.path)


def _owned(path: Path) -> tuple[Path, str | None] | None:
    """The repository a worktree folder belongs to and the job that made it, read from the repository's side (the
    worktree's `.git` file only points the way: the repository's record of the worktree must lead back)."""
    try:
        pointer = (path / ".git").read_text().strip()
    except OSError:
        return None
    if not pointer.startswith("gitdir: "):
        return None
    own = Path(pointer.removeprefix("gitdir: "))
    try:
        back = Path((own / "gitdir").read_text().strip())
    except OSError:
        return None
    if back.parent != path:
        return None
    try:
        job_id: str | None = (own / JOB_FILE).read_text().strip() or None
    except OSError:
        job_id = None
    common = own.parent.parent
    return (common.parent if common.name == ".git" else common), job_id


def _drop(repo: Path, path: Path) -> None:
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    git("-C", str(repo), "worktree", "prune", check=False)


class _Git:
    """git on the worktree through the git directory the worker made it with, never its `.git` file."""

    def __init__(self, tree: Worktree) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
            "GIT_DIR": str(tree.git_dir),
            "GIT_WORK_TREE": str(tree.path),
        }
        self.path = tree.path

    def __call__(self, *args: str) -> str:
        return git(*args, cwd=self.path, env=self.env)

    def succeeds(self, *args: str) -> bool:
        """Whether the command exits 0 (`diff --quiet`: no difference)."""
        try:
            git(*args, cwd=self.path, env=self.env)
        except GitFailed:
            return False
        return True


def _first_line(prompt: str) -> str:
    for line in prompt.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "claudeq job"
