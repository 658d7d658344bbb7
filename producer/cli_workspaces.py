"""`claudeq diff JOB`, `claudeq artifacts JOB` and `claudeq workspaces list|prune`: what coding jobs changed and
produced, and their kept worktrees, mounted by `claudeq.producer.cli` (docs/jobs.md#coding-jobs, #artifacts).

Exit codes follow `claudeq`: 0 ok, 1 runtime error, 2 bad input, 5 no such job (or a job with no change).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import redis
import typer
from rich.console import Console
from rich.markup import escape

from claudeq.artifacts import Artifacts
from claudeq.errors import ConfigError, JobNotFound, RecordUnreadable
from claudeq.models import ACTIVE
from claudeq.workspaces import WorkspaceChange

from ..config.settings import Settings, load_settings
from .client import Client

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 5

workspaces_app = typer.Typer(help="Coding jobs' worktrees kept on this host (a job's workspace.keep).")

err = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _fail(code: int, message: str, as_json: bool) -> typer.Exit:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def _settings(as_json: bool) -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        raise _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json) from None


def stat_line(change: WorkspaceChange) -> str:
    """One line: files, insertions, deletions, the branch and its commit."""
    commit = change.commit[:12] if change.commit else "no commit"
    return (
        f"{change.files} file(s) changed, {change.insertions} insertion(s)(+), {change.deletions} deletion(s)(-)"
        f"  on {change.branch} ({commit}) against {change.ref}"
    )


def diff(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    stat: Annotated[bool, typer.Option("--stat", help="Only the stat: files, insertions, deletions.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a coding job's change: its patch against `ref` (or its stat), its branch and commit."""
    try:
        change = Client(_settings(as_json)).diff(job_id)
    except JobNotFound as exc:
        raise _fail(EXIT_NOT_FOUND, str(exc), as_json) from None
    except (RecordUnreadable, redis.RedisError) as exc:
        raise _fail(EXIT_ERROR, str(exc), as_json) from None
    if change is None:
        raise _fail(EXIT_NOT_FOUND, f"job {job_id} has no workspace change (no workspace, or no attempt yet)", as_json)
    if as_json:
        data = change.model_dump(mode="json", exclude={"patch_z"})
        if not stat:
            data["patch"] = change.patch
        print(json.dumps(data))
        return
    if change.patch_archived and change.patch is not None and not stat:
        err.print("the patch was larger than the record keeps: read from the transcript archive")
    if stat or change.patch is None:
        print(stat_line(change))
        if change.truncated and not stat:
            err.print(f"the patch was larger than the record keeps: see branch {change.branch}")
        return
    print(change.patch, end="")


@workspaces_app.command("list")
def list_kept(as_json: JsonOpt = False) -> None:
    """List the worktrees kept on this host: path, repository, job."""
    from ..worker.workspace.worktree import kept

    found = kept(_settings(as_json))
    if as_json:
        print(json.dumps([{"path": str(k.path), "repo": str(k.repo), "job_id": k.job_id} for k in found]))
        return
    for k in found:
        print(f"{k.path}  {k.repo}  {k.job_id or '-'}")


@workspaces_app.command("prune")
def prune(as_json: JsonOpt = False) -> None:
    """Remove the kept worktrees whose jobs have ended (their branches stay)."""
    from ..worker.workspace.worktree import drop, kept

    settings = _settings(as_json)
    client = Client(settings)
    removed: list[str] = []
    for k in kept(settings):
        if k.job_id is not None:
            try:
                if client.get(k.job_id).status in ACTIVE:
                    continue  # its job still runs (or will): not ours to take away
            except JobNotFound:
                pass  # the record expired: the job ended long ago
            except (RecordUnreadable, redis.RedisError) as exc:
                raise _fail(EXIT_ERROR, str(exc), as_json) from None
        drop(k)
        removed.append(str(k.path))
    if as_json:
        print(json.dumps({"removed": removed}))
        return
    for path in removed:
        print(f"removed {path}")


def artifacts(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Write every artifact under this folder, byte for byte.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the files a job wrote under $CLAUDEQ_OUTPUTS (name, size, SHA-256), or fetch them with --out."""
    try:
        client = Client(_settings(as_json))
        record = client.get(job_id)
        kept = record.artifacts or Artifacts()
        written: list[str] = []
        if out_dir is not None:
            for item in kept.files:
                target = (out_dir / item.name).resolve()
                if out_dir.resolve() not in target.parents:
                    raise _fail(EXIT_ERROR, f"artifact name {item.name!r} leads outside {out_dir}", as_json)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(client.artifact(job_id, item.name))
                written.append(str(target))
    except JobNotFound as exc:
        raise _fail(EXIT_NOT_FOUND, str(exc), as_json) from None
    except (RecordUnreadable, redis.RedisError) as exc:
        raise _fail(EXIT_ERROR, str(exc), as_json) from None
    if as_json:
        print(json.dumps({**kept.model_dump(mode="json"), "written": written}))
        return
    for item in kept.files:
        print(f"{item.size:>10}  {item.sha256[:16]}  {item.name}")
    for name in kept.dropped:
        print(f"{'dropped':>10}  {'':16}  {name}")
