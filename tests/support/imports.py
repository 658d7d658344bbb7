"""What a source file imports, named absolutely: `from ..run.outcome import X` in worker/delivery/handler.py is
`claudeq.worker.run.outcome`. The rooms (worker/, producer/, config/, simulator/) import one another relatively
(docs/architecture.md#who-imports-whom), so the import rules read both forms."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.tree import ROOT


def package_of(path: Path, root: Path = ROOT) -> list[str]:
    """The dotted package `path` belongs to, as parts: worker/delivery/handler.py -> claudeq, worker, delivery;
    claudeq/keys.py -> claudeq; claudeq/jobs/_store.py -> claudeq, jobs. A file outside the checkout belongs to no
    package (an empty list)."""
    try:
        parts = path.resolve().relative_to(root).parent.parts
    except ValueError:
        return []
    return list(parts) if parts[:1] == ("claudeq",) else ["claudeq", *parts]


def absolute_module(node: ast.ImportFrom, package: list[str]) -> str | None:
    """The module `node` imports from, absolutely (None: a relative import that climbs out of the package)."""
    if node.level == 0:
        return node.module
    if node.level > len(package):
        return None
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)
