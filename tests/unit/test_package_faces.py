"""The contract's packages are entered through their faces (docs/architecture.md#who-imports-whom): a module outside
`claudeq/jobs/` imports `claudeq.jobs`, never `claudeq.jobs._store`; only the package's own modules import its
private (`_name.py`) ones. Every Python file of the checkout is held to it: the contract, the rooms, the tests,
the benchmarks and the operator tooling."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

from tests.support.imports import absolute_module, package_of
from tests.support.tree import ROOT

#: Folders never walked: environments, build output, caches, VCS data.
SKIP_DIRS = frozenset({".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


def contract_packages(root: Path = ROOT) -> set[str]:
    """`claudeq.<name>` for each package of the contract's own (claudeq/jobs/, claudeq/lua/, ...; not the rooms
    linked in)."""
    return {f"claudeq.{p.parent.name}" for p in (root / "claudeq").glob("*/__init__.py") if not p.parent.is_symlink()}


def python_files(root: Path = ROOT) -> Iterator[Path]:
    """Every Python file of the checkout, each once (the links in claudeq/ are not followed)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        yield from (Path(folder) / name for name in sorted(files) if name.endswith(".py"))


def imported_modules(source: str, package: list[str]) -> Iterator[tuple[int, str]]:
    """(line, module) for each module `source` imports, named absolutely; `from p import m` counts `p.m` too (m may
    be a module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (module := absolute_module(node, package)):
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)


def private_module_of(module: str, packages: set[str]) -> tuple[str, str] | None:
    """The package and the private module `module` is or lies in (`claudeq.jobs._store.JobStore` -> `claudeq.jobs`,
    `claudeq.jobs._store`), or None."""
    parts = module.split(".")
    for i in range(2, len(parts)):
        package = ".".join(parts[:i])
        if package in packages and parts[i].startswith("_") and not parts[i].startswith("__"):
            return package, f"{package}.{parts[i]}"
    return None


def private_imports(path: Path, packages: set[str], root: Path = ROOT) -> list[str]:
    """`file:line module` for each import in `path` of a package's private module from outside that package."""
    package = package_of(path, root)
    inside = ".".join(package)
    found = []
    for line, module in imported_modules(path.read_text(), package):
        private = private_module_of(module, packages)
        if private is not None and inside != private[0] and not inside.startswith(private[0] + "."):
            found.append(f"{path.relative_to(root)}:{line} {private[1]}")
    return sorted(set(found))


def test_no_module_outside_a_package_imports_its_private_modules() -> None:
    packages = contract_packages()
    assert {"claudeq.jobs", "claudeq.accounts", "claudeq.tenants", "claudeq.broker"} <= packages
    found = [hit for path in python_files() for hit in private_imports(path, packages)]
    assert found == []


def test_a_private_import_from_outside_is_caught_and_one_inside_is_not(tmp_path: Path) -> None:
    tmp_path = tmp_path.resolve()
    (tmp_path / "claudeq" / "jobs").mkdir(parents=True)
    (tmp_path / "producer").mkdir()
    inside = tmp_path / "claudeq" / "jobs" / "_counts.py"
    inside.write_text("from ._store import JobStore\nfrom . import _scripts as scripts\n")
    outside = tmp_path / "producer" / "client.py"
    outside.write_text(
        "from claudeq.jobs._store import JobStore\nfrom claudeq.jobs import _scripts\nimport claudeq.jobs._counts\n"
        "from claudeq.jobs import JobStore, scripts\nfrom ..jobs import __version__\n"
    )
    packages = {"claudeq.jobs"}
    assert private_imports(inside, packages, tmp_path) == []
    assert private_imports(outside, packages, tmp_path) == [
        "producer/client.py:1 claudeq.jobs._store",
        "producer/client.py:2 claudeq.jobs._scripts",
        "producer/client.py:3 claudeq.jobs._counts",
    ]
