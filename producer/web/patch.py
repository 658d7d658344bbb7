"""A coding job's patch as the job page shows it: one section per file, each line marked added, removed, a hunk
header or context (docs/jobs.md#coding-jobs). Pure: the template escapes every line (an agent wrote them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LineKind = Literal["add", "del", "hunk", "meta", "ctx"]
#: The most lines a page shows of one patch (the rest: `claudeq diff JOB`).
MAX_LINES = 5000


@dataclass
class FileSection:
    """One file's part of a patch: its path, counts and lines."""

    path: str
    lines: list[tuple[LineKind, str]] = field(default_factory=list)
    added: int = 0
    removed: int = 0


def sections(patch: str, max_lines: int = MAX_LINES) -> tuple[list[FileSection], bool]:
    """The patch split per file (`diff --git a/X b/Y` starts one), and whether lines were left out past `max_lines`."""
    out: list[FileSection] = []
    shown = 0
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            out.append(FileSection(path=parts[1] if len(parts) == 2 else line.removeprefix("diff --git ")))
            continue
        if not out:
            continue
        if shown >= max_lines:
            return out, True
        shown += 1
        current = out[-1]
        kind: LineKind
        if line.startswith("@@"):
            kind = "hunk"
        elif line.startswith(
            (
                "+++",
                "---",
                "index ",
                "new file",
                "deleted file",
                "similarity",
                "rename ",
                "old mode",
                "new mode",
                "Binary files",
                "GIT binary patch",
            )
        ):
            kind = "meta"
        elif line.startswith("+"):
            kind = "add"
            current.added += 1
        elif line.startswith("-"):
            kind = "del"
            current.removed += 1
        else:
            kind = "ctx"
        current.lines.append((kind, line))
    return out, False
