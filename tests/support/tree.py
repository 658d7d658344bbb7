"""The checkout these tests sit in: every import of `claudeq`, in this process or a subprocess, comes from it.

pytest's `pythonpath = ["."]` puts the checkout first for the test process itself. Subprocesses (workers, the CLI,
the exporter) get it first on PYTHONPATH and run from it, so a copy of the tree never tests the original through an
editable install (tests/unit/test_import_tree.py and tests/e2e/test_import_tree.py check both).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The root of this checkout (the folder holding pyproject.toml).
ROOT = Path(__file__).resolve().parents[2]


def tree_env(environ: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`environ` (default: this process's) with this checkout first on PYTHONPATH, plus `extra`."""
    env = dict(os.environ if environ is None else environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])
    env.update(extra)
    return env


def under_root(path: str | os.PathLike[str] | None) -> bool:
    """Whether `path` (symlinks resolved) lies inside this checkout."""
    return path is not None and ROOT in Path(path).resolve().parents


__all__ = ["ROOT", "tree_env", "under_root"]
