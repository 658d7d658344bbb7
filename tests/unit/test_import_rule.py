"""Who may import whom (docs/architecture.md#who-imports-whom), checked on the source.

Each of the worker's packages names, in its `__init__` docstring, the parts of the worker it imports from
(`Imports from the worker: store, run.`); every import in the package's modules — at the top, inside a function or
under TYPE_CHECKING — must come from that list or the package itself. The worker's root modules `redaction`,
`loop_host` and `broker_transport` import nothing of the worker; `app`, `main` and `__main__` are its entry points
and import anything. The contract (claudeq/) and the configuration import neither side, and a producer module
imports the worker only inside a function (a command whose extra brings the fleet's packages).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.imports import absolute_module, package_of

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "worker"
#: The worker's root modules that import nothing of the worker (every package may import them).
LEAVES = {"redaction", "loop_host", "broker_transport"}
#: The worker's entry points: they wire everything together.
ENTRY_POINTS = {"app", "main", "__main__"}
RULE = re.compile(r"^Imports from the worker: (.+?)\.?$", re.MULTILINE)


def worker_imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, the part of the worker imported — its package or root module —, whether at module level) for every
    import of `claudeq.worker` in the file."""
    tree = ast.parse(path.read_text())
    package = package_of(path)
    top = {id(node) for node in tree.body} | {
        id(inner)
        for node in tree.body
        if isinstance(node, ast.If)  # `if TYPE_CHECKING:` blocks count as the module's level
        for inner in node.body
    }
    for node in ast.walk(tree):
        names: list[str] = []
        module = absolute_module(node, package) if isinstance(node, ast.ImportFrom) else None
        if module:
            parts = module.split(".")
            if parts[:2] == ["claudeq", "worker"]:
                names = [alias.name for alias in node.names] if len(parts) == 2 else [parts[2]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[2] for a in node.names if a.name.startswith("claudeq.worker.")]
        for name in names:
            yield node.lineno, name, id(node) in top


def allowed_of(package: Path) -> set[str]:
    """What a worker package's `__init__` says it imports from the worker."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    found = RULE.search(doc)
    assert found, f"{package.name}/__init__.py names no 'Imports from the worker: ...' line"
    listed = found.group(1).strip()
    return set() if listed == "nothing" else {name.strip() for name in listed.split(",")}


def packages() -> list[Path]:
    return sorted(p for p in WORKER.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def violations() -> list[str]:
    """Every import in the worker that its package's rule does not allow."""
    parts = {p.name for p in packages()} | {p.stem for p in WORKER.glob("*.py")}
    found = []
    for package in packages():
        allowed = allowed_of(package) | {package.name}
        unknown = allowed - parts
        if unknown:
            found.append(f"{package.name}/__init__.py names what is not in the worker: {sorted(unknown)}")
        for path in sorted(package.rglob("*.py")):
            for line, name, _ in worker_imports(path):
                if name not in allowed:
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {name} (allowed: {sorted(allowed)})")
    for name in LEAVES:
        path = WORKER / f"{name}.py"
        found += [f"{path.relative_to(ROOT)}:{line} imports {imported}" for line, imported, _ in worker_imports(path)]
    return found


def test_every_worker_package_imports_only_what_its_init_names() -> None:
    assert violations() == []


def test_the_packages_form_layers_without_a_cycle() -> None:
    rules = {p.name: allowed_of(p) - LEAVES for p in packages()}
    order: list[str] = []
    while rules:
        ready = sorted(name for name, needs in rules.items() if needs <= set(order))
        assert ready, f"a cycle among {sorted(rules)}"
        order += ready
        for name in ready:
            del rules[name]
    assert order[-2:] == ["delivery", "background"], order


def test_every_worker_module_belongs_to_a_package_or_is_a_known_root_module() -> None:
    roots = {p.stem for p in WORKER.glob("*.py")} - {"__init__"}
    assert roots == LEAVES | ENTRY_POINTS


@pytest.mark.parametrize("folder", ["claudeq", "config"])
def test_the_contract_and_the_configuration_import_neither_side(folder: str) -> None:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.is_relative_to(ROOT / "claudeq" / "testing"):
            continue  # the testing kit runs the worker's engine in-process: it is the worker's user
        if any(p.is_symlink() for p in path.relative_to(ROOT).parents if p != Path(".")):
            continue
        tree = ast.parse(path.read_text())
        package = package_of(path)
        for node in ast.walk(tree):
            module = absolute_module(node, package) if isinstance(node, ast.ImportFrom) else None
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [module or ""]
            for name in modules:
                side = name.startswith(("claudeq.worker", "claudeq.producer", "claudeq.simulator"))
                if side and not (path == ROOT / "claudeq" / "__init__.py" and name == "claudeq.producer.client"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert found == []


def test_a_producer_imports_the_worker_only_inside_a_command() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name} at module level"
        for path in sorted((ROOT / "producer").rglob("*.py"))
        for line, name, at_top in worker_imports(path)
        if at_top
    ]
    assert found == []


# ---- the checks catch what they are for ------------------------------------------------------------------------


def test_an_import_outside_the_rule_is_caught(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from claudeq.worker.run.outcome import RunOutcome\n"
        "from claudeq.worker import redaction\n"
        "if TYPE_CHECKING:\n    from claudeq.worker.delivery.engine import Engine\n"
        "def f():\n    import claudeq.worker.accounts.manager\n"
    )
    assert list(worker_imports(module)) == [
        (2, "run", True),
        (3, "redaction", True),
        (5, "delivery", True),
        (7, "accounts", False),
    ]


def test_a_relative_import_is_read_as_the_module_it_names() -> None:
    handler = ROOT / "worker" / "delivery" / "handler.py"
    node = ast.parse("from ..run.outcome import RunOutcome\nfrom . import retry\nfrom ...config import x\n").body
    assert [absolute_module(n, package_of(handler)) for n in node if isinstance(n, ast.ImportFrom)] == [
        "claudeq.worker.run.outcome",
        "claudeq.worker.delivery",
        "claudeq.config",
    ]
    module = handler.parent / "probe.py"
    assert package_of(module) == ["claudeq", "worker", "delivery"]
    assert package_of(ROOT / "claudeq" / "jobs.py") == ["claudeq"]


def test_a_package_without_a_rule_is_caught(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""No rule here."""\n')
    with pytest.raises(AssertionError, match="names no"):
        allowed_of(tmp_path)
    (tmp_path / "__init__.py").write_text('"""Things.\n\nImports from the worker: nothing.\n"""\n')
    assert allowed_of(tmp_path) == set()
