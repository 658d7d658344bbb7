"""A coding job's workspace: the git repository it works in (the spec's `workspace`) and the change it made (the
record's `workspace`). What the worker does with them is `claudeq.worker.workspace` (docs/jobs.md#coding-jobs)."""

from __future__ import annotations

import base64
import re
import zlib

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: A git ref or branch name a spec may give: no spaces, no `..`, no leading `-` (never read as an option), no
#: control characters; git's own check (`check-ref-format`) is the worker's.
REF_NAME = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/@{}^~+-]{1,200}$")
#: The branch a job's change goes on when the spec names none: `claudeq/<job id>`.
BRANCH_PREFIX = "claudeq/"


class WorkspaceSpec(BaseModel):
    """The git repository a job works in: a worktree of `ref` of its own, on `branch`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(description="A git repository (work tree or bare) under a workspace root.")
    ref: str = Field(default="main", description="What the job's worktree starts from, and its diff is against.")
    branch: str | None = Field(default=None, description="The branch its change goes on (default claudeq/<job id>).")
    keep: bool = Field(default=False, description="Keep the worktree when the job ends (claudeq workspaces prune).")

    @field_validator("repo")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path")
        return value

    @field_validator("ref", "branch")
    @classmethod
    def _ref_name(cls, value: str | None) -> str | None:
        if value is not None and (not REF_NAME.match(value) or value.endswith((".lock", "/", "."))):
            raise ValueError(f"{value!r} is not a git ref name")
        return value


class ChangeStat(BaseModel):
    """What an attempt changed: files, insertions, deletions against the job's `ref`, and the commit holding it."""

    files: int = 0
    insertions: int = 0
    deletions: int = 0
    commit: str | None = None  # None: the attempt left the branch where it started


class WorkspaceChange(ChangeStat):
    """The job's change as the record keeps it: the stat, its branch and commits, and the patch (zlib, base64) while
    it fits `CLAUDEQ_WORKSPACE_PATCH_MAX_BYTES`; beyond that only the stat and the branch (`truncated`), and the whole
    patch in the transcript archive when one is configured (`patch_archived`: `Client.diff` reads it from there)."""

    branch: str
    ref: str
    ref_commit: str  # what `ref` named when the job's first attempt began: the diff's base
    base: str  # the commit the job's attempts start from (ref_commit; a conversation's branch as its last turn left it)
    patch_z: str | None = None
    truncated: bool = False
    patch_archived: bool = False  # truncated, and the whole patch is in the archive (read back with `patch_z` set)
    worktree: str | None = None  # where it is kept (`keep`), else None once removed

    @property
    def patch(self) -> str | None:
        """The patch as text (None when it was too large to keep and not read from the archive)."""
        return None if self.patch_z is None else unpack_patch(self.patch_z)


def pack_patch(patch: str) -> str:
    """A patch as stored: zlib-compressed, base64."""
    return base64.b64encode(zlib.compress(patch.encode(), 6)).decode()


def unpack_patch(packed: str) -> str:
    """A stored patch back as text."""
    return zlib.decompress(base64.b64decode(packed)).decode(errors="replace")
