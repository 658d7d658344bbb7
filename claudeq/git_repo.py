"""Reading a job's git repository: what submit checks (`workspace_problems`) and the worker's git command line.

Every git command runs with the repository's own hooks off and any owner accepted: the worker (often root) reads
repositories other uids own, and a hook or an fsmonitor of a repository must never run as the worker
(docs/jobs.md#coding-jobs).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from claudeq.config.settings import WorkerPolicy
from claudeq.workspaces import BRANCH_PREFIX, WorkspaceSpec

GIT_TIMEOUT_S = 120.0
#: Settings every git command of claudeq runs with (before the command's own arguments).
SAFE_CONFIG: tuple[str, ...] = (
    "-c",
    "safe.directory=*",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "user.name=claudeq",
    "-c",
    "user.email=claudeq@localhost",
)


class GitFailed(Exception):
    """A git command failed: its arguments and what it said."""

    def __init__(self, args: list[str], code: int, said: str) -> None:
        super().__init__(f"git {' '.join(args)} failed (exit {code}): {said.strip()[-500:]}")
        self.code = code
        self.said = said


def git(*args: str, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None) -> str:
    """Run git with `SAFE_CONFIG`; its stdout. GitFailed when it exits non-zero and `check`."""
    command = ["git", *SAFE_CONFIG, *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False, env=env)
    if check and done.returncode != 0:
        raise GitFailed(list(args), done.returncode, done.stderr or done.stdout)
    return done.stdout


def git_dir(repo: Path) -> Path | None:
    """The repository's git directory (a work tree's `.git`, or the bare repository itself); None when `repo` is
    not a git repository."""
    try:
        found = Path(git("-C", str(repo), "rev-parse", "--absolute-git-dir").strip())
        bare = git("-C", str(repo), "rev-parse", "--is-bare-repository").strip() == "true"
        top = found if bare else Path(git("-C", str(repo), "rev-parse", "--show-toplevel").strip())
    except (GitFailed, OSError, subprocess.TimeoutExpired):
        return None
    # Not the repository a plain folder inside another one walks up to: `repo` must be the repository's own top.
    return found if top == repo.resolve() else None


def commit_of(repo: Path, ref: str) -> str | None:
    """The commit `ref` names in `repo`, or None."""
    out = git("-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    return out.strip() or None


def branch_exists(repo: Path, branch: str) -> bool:
    """Whether `repo` has a local branch `branch`."""
    return commit_of(repo, f"refs/heads/{branch}") is not None


def valid_branch(repo: Path, branch: str) -> bool:
    """Whether git takes `branch` as a branch name."""
    return git("-C", str(repo), "check-ref-format", "--branch", branch, check=False).strip() != ""


def continues(spec_conversation: str | None, spec_resume: str | None) -> bool:
    """Whether a job may continue an existing branch (a conversation's turn, a resumed session)."""
    return bool(spec_conversation or spec_resume)


def job_branch(workspace: WorkspaceSpec, job_id: str | None, tenant: str, conversation: str | None) -> str | None:
    """The branch a job's change goes on: the spec's, a conversation's own (its turns build on it), or
    `claudeq/<job id>` (None while the id is not known: at submit)."""
    if workspace.branch:
        return workspace.branch
    if conversation:
        readable = re.sub(r"[^A-Za-z0-9_-]+", "-", conversation).strip("-")[:60] or "c"
        digest = hashlib.sha256(f"{tenant}\0{conversation}".encode()).hexdigest()[:8]
        return f"{BRANCH_PREFIX}conversation/{readable}-{digest}"
    return None if job_id is None else f"{BRANCH_PREFIX}{job_id}"


def root_of(path: Path, policy: WorkerPolicy) -> Path | None:
    """The workspace root `path` lies under, or None."""
    target = path.resolve()
    for root in policy.workspace_roots:
        real = root.resolve()
        if target == real or real in target.parents:
            return root
    return None


def workspace_problems(
    workspace: WorkspaceSpec, policy: WorkerPolicy, *, conversation: str | None, resume: str | None, tenant: str
) -> list[tuple[str, str]]:
    """What is wrong with `workspace` as far as this host can tell, as (field, reason) pairs: outside the roots;
    and, where the roots exist here, not a git repository, an unknown ref, a branch that is not the job's."""
    repo = Path(workspace.repo)
    root = root_of(repo, policy)
    if root is None:
        roots = ", ".join(str(r) for r in policy.workspace_roots) or "none configured"
        return [("workspace.repo", f"{repo} is outside the workspace roots ({roots})")]
    if not root.is_dir():
        return []  # another host's roots: the worker checks the rest
    if not repo.is_dir():
        return [("workspace.repo", f"{repo} does not exist")]
    if git_dir(repo) is None:
        return [("workspace.repo", f"{repo} is not a git repository (a work tree's top or a bare repository)")]
    problems: list[tuple[str, str]] = []
    if commit_of(repo, workspace.ref) is None:
        problems.append(("workspace.ref", f"{workspace.ref!r} names no commit in {repo}"))
    branch = job_branch(workspace, None, tenant, conversation)
    if branch is not None:
        if not valid_branch(repo, branch):
            problems.append(("workspace.branch", f"{branch!r} is not a valid branch name"))
        elif branch_exists(repo, branch) and not continues(conversation, resume):
            problems.append(("workspace.branch", f"branch {branch!r} already exists in {repo} and is not this job's"))
    return problems
