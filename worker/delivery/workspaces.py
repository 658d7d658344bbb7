"""A coding job's worktree around each attempt's run: made before it, committed, diffed and stored after it (any
outcome), removed unless the job keeps it (docs/jobs.md#coding-jobs). The git work is `worker/workspace/worktree.py`;
this module carries it off the engine loop and into the record, through the delivery's fence."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from claudeq.archive import open_archive
from claudeq.models import Attempt, JobError, JobSpec

from ...config.settings import Settings
from ..workspace.worktree import WorkspaceProblem, Worktree, collect, prepare, remove, stat_of
from .fenced import FencedWriter
from .state import Delivery

log = logging.getLogger("claudeq.engine")


class Workspaces:
    """The handler's side of coding jobs: one per delivery handler."""

    def __init__(self, settings: Settings, writer: FencedWriter) -> None:
        self.settings = settings
        self.writer = writer

    async def prepare(self, d: Delivery, spec: JobSpec) -> tuple[Worktree | None, JobError | None]:
        """The attempt's fresh worktree (None for a job without `workspace`), or why it cannot be made (the job
        fails with kind `workspace`)."""
        if spec.workspace is None or spec.cwd is None:
            return None, None
        record = d.record.model_copy(update={"attempts": list(d.attempts)})
        try:
            return await asyncio.to_thread(prepare, record, Path(spec.cwd)), None
        except WorkspaceProblem as exc:
            return None, JobError(kind="workspace", message=str(exc))

    async def collect(self, d: Delivery, tree: Worktree, attempt: Attempt) -> Attempt:
        """Commit and diff what the run changed, keep it in the record (fenced) and give the attempt its stat;
        remove the worktree unless the job keeps it. A delivery that lost the job leaves both alone: the job and its
        branch are another worker's now."""
        if d.lost:
            return attempt
        spec = d.record.spec
        try:
            limit = self.settings.workspace_patch_max_bytes
            change = await asyncio.to_thread(collect, tree, spec, d.job_id, limit, self._archive_patch(d.job_id))
        except Exception:
            log.exception("job %s: its change could not be collected from %s", d.job_id, tree.path)
            return attempt
        finally:
            if spec.workspace is not None and not spec.workspace.keep:
                await asyncio.to_thread(remove, tree)
        attempt = attempt.model_copy(update={"change": stat_of(change)})
        d.attempts[-1] = attempt
        d.record = d.record.model_copy(update={"workspace": change})
        await self.writer.write(d, hold_events=True, workspace=change, attempts=d.attempts)
        return attempt

    def _archive_patch(self, job_id: str) -> Callable[[bytes], bool] | None:
        """Where a patch too large for the record goes: the transcript archive, if one is configured, for as long
        as a finished job is kept (docs/jobs.md#coding-jobs). Called in collect's thread."""
        archive = open_archive(self.settings.archive_url)
        if archive is None:
            return None
        prefix, keep_s = self.settings.key_prefix, self.settings.result_ttl_s

        def put(patch: bytes) -> bool:
            try:
                archive.put_patch(prefix, job_id, patch, time.time() + keep_s)
            except Exception:
                log.exception("job %s: its patch could not be archived (the record keeps its stat and branch)", job_id)
                return False
            return True

        return put
