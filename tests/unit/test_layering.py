"""Who imports whom (docs/architecture.md#who-imports-whom): the contract imports neither side, config only the
error tree, the simulator nothing of claudeq, and a producer importing the client loads no worker machinery."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.imports import absolute_module

ROOT = Path(__file__).resolve().parents[2]

#: Per room: the claudeq modules its files may import (a prefix matches the module and its submodules).
ALLOWED: dict[str, tuple[str, ...]] = {
    "claudeq": ("claudeq.config", "claudeq.errors", "claudeq.keys", "claudeq.models"),  # + claudeq/* itself
    "config": ("claudeq.config", "claudeq.errors"),
    "simulator": ("claudeq.simulator",),
}
#: Modules the client must not load: the SDK, Prometheus, Celery's worker machinery, any worker module.
NOT_FOR_PRODUCERS = ("claude_agent_sdk", "prometheus_client", "celery.worker", "claudeq.worker")
#: Nor, to submit, Celery or kombu at all: the base install has neither (docs/architecture.md#packaging).
NOT_FOR_SUBMITTING = ("celery", "kombu")


def claudeq_imports(source: str, package: Sequence[str] = ("claudeq",)) -> set[str]:
    """The `claudeq…` modules a Python source of `package` imports (`from claudeq import x` counts as `claudeq.x`,
    `from ..x import y` in a module of claudeq.worker.run as `claudeq.worker.x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "claudeq"}
        elif isinstance(node, ast.ImportFrom) and (module := absolute_module(node, list(package))):
            if module == "claudeq" or (node.level and not node.module):
                found |= {f"{module}.{alias.name}" for alias in node.names}
            elif module.startswith("claudeq."):
                found.add(module)
    return found


def contract_modules() -> set[str]:
    """`claudeq.<name>` for every module and package of the contract itself (claudeq/*.py, and its own folders such
    as claudeq/lua/: not the rooms linked in)."""
    modules = {f"claudeq.{p.stem}" for p in (ROOT / "claudeq").glob("*.py") if p.stem != "__init__"}
    packages = {
        f"claudeq.{p.parent.name}" for p in (ROOT / "claudeq").glob("*/__init__.py") if not p.parent.is_symlink()
    }
    return modules | packages


def violations(room: str, sources: dict[str, str], allowed: tuple[str, ...]) -> list[str]:
    """`file: module` for each import in `sources` outside `allowed` (prefixes)."""
    out = []
    for name, source in sorted(sources.items()):
        for module in sorted(claudeq_imports(source, ["claudeq"] if room == "claudeq" else ["claudeq", room])):
            if not any(module == a or module.startswith(a + ".") for a in allowed):
                out.append(f"{room}/{name}: {module}")
    return out


def _sources(room: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / room).glob("*.py"))}


def _package_sources() -> dict[str, tuple[list[str], str]]:
    """The modules of the contract's own packages (claudeq/jobs/_store.py -> `claudeq.jobs._store`, its
    `__init__.py` -> `claudeq.jobs`), each with its package and its source. Not the testing kit's: it runs the
    worker's engine (docs/testing.md), and is no part of what both sides share."""
    out = {}
    for init in sorted((ROOT / "claudeq").glob("*/__init__.py")):
        if init.parent.is_symlink() or init.parent.name == "testing":
            continue
        package = ["claudeq", init.parent.name]
        for path in sorted(init.parent.glob("*.py")):
            name = ".".join(package if path.stem == "__init__" else [*package, path.stem])
            out[name] = (package, path.read_text())
    return out


def test_the_contract_imports_neither_producer_nor_worker() -> None:
    allowed = ALLOWED["claudeq"] + tuple(contract_modules())
    sources = _sources("claudeq")
    root = {"__init__.py": sources.pop("__init__.py")}
    assert violations("claudeq", sources, allowed) == []
    # The package root also names the producer's client, which it loads only when first named (claudeq/__init__.py).
    assert violations("claudeq", root, (*allowed, "claudeq.producer.client")) == []
    # The modules of its packages too (claudeq/jobs/_store.py, ...), their relative imports read in their package.
    found = [
        f"{name}: {module}"
        for name, (package, source) in _package_sources().items()
        for module in sorted(claudeq_imports(source, package))
        if not any(module == a or module.startswith(a + ".") for a in allowed)
    ]
    assert found == []


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles in `graph` (module -> modules it imports): each strongly connected part of more than one module,
    sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_the_contract_has_no_import_circle() -> None:
    """Every import a reader sees counts (inside functions and under TYPE_CHECKING too): the contract's modules stand
    on one another in one order (docs/architecture.md#who-imports-whom)."""
    packages = _package_sources()
    own = contract_modules() | set(packages)
    graph = {
        f"claudeq.{name.removesuffix('.py')}": {m for m in claudeq_imports(source) if m in own}
        for name, source in _sources("claudeq").items()
        if name != "__init__.py"
    }
    graph |= {
        name: {m for m in claudeq_imports(source, package) if m in own} for name, (package, source) in packages.items()
    }
    assert import_circles(graph) == []


def test_import_circles_are_found() -> None:
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


#: The rooms linked into claudeq/ (claudeq/worker -> ../worker, ...): a reader following `claudeq.worker.x` lands on
#: the link, so they import one another relatively and land on the file (docs/architecture.md#who-imports-whom).
ROOMS = ("worker", "producer", "config", "simulator")


def through_links(path: Path) -> list[str]:
    """`file:line module` of each import in `path` written as `claudeq.<room>...`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        linked = [n for n in names if n.split(".")[:2] in [["claudeq", room] for room in ROOMS]]
        found += [f"{path.name}:{node.lineno} {n}" for n in linked]
    return found


def test_the_rooms_import_one_another_relatively() -> None:
    found = [hit for room in ROOMS for path in sorted((ROOT / room).rglob("*.py")) for hit in through_links(path)]
    assert found == []


def test_an_import_through_a_link_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from claudeq.worker.run import outcome\nfrom ..run import x\nimport claudeq.config.settings\n")
    assert through_links(module) == ["m.py:1 claudeq.worker.run", "m.py:3 claudeq.config.settings"]


def test_importing_the_package_root_loads_only_the_error_tree() -> None:
    code = "import sys, claudeq\nprint(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'claudeq')))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "claudeq,claudeq.errors"


def test_the_command_line_loads_no_worker_package_until_a_command_needs_one() -> None:
    """`claudeq --help` and the producer's commands run on the base install (docs/architecture.md#packaging)."""
    extras = (*NOT_FOR_PRODUCERS[:2], "celery", "kombu", "mcp", "tenacity")
    code = (
        "import sys, claudeq.producer.cli, claudeq.producer.top\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {extras!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_config_imports_only_itself_and_the_error_tree() -> None:
    assert violations("config", _sources("config"), ALLOWED["config"]) == []


def test_the_simulator_imports_nothing_else_of_claudeq() -> None:
    assert violations("simulator", _sources("simulator"), ALLOWED["simulator"]) == []


def test_importing_the_client_loads_no_sdk_no_prometheus_no_celery_worker_no_worker_module() -> None:
    code = (
        "import sys, claudeq.producer.client\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {NOT_FOR_PRODUCERS!r} "
        f"or any(m == p or m.startswith(p + '.') for p in {NOT_FOR_PRODUCERS!r}))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_testing_kit_runs_a_job_with_no_sdk_celery_prometheus_or_mcp() -> None:
    """claudeq.testing runs on the producer install plus its `testing` extra (docs/testing.md#installing): a whole
    job, a retry and a conversation's transcript included, with the fleet's heavy packages made unimportable
    (tests/integration/test_packaging.py does the same on a real pip install)."""
    heavy = ("claude_agent_sdk", "celery", "kombu", "prometheus_client", "mcp", "uvicorn", "starlette", "httpx")
    code = (
        f"import sys\nfor name in {heavy!r}:\n    sys.modules[name] = None\n"
        "from claudeq.testing import fleet, overloaded\n"
        "with fleet() as f:\n"
        "    f.fail('x', overloaded())\n"
        "    f.reply('x', text='done')\n"
        "    first = f.client.submit(prompt='x', conversation='c').wait()\n"
        "    second = f.client.submit(prompt='x again', conversation='c').wait()\n"
        "same = second.session_id == first.session_id\n"
        "print(first.status, [a.outcome for a in first.attempts], second.status, same)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "succeeded ['transient_error', 'success'] succeeded True"


def test_a_client_loads_no_celery_until_asked_for_its_app() -> None:
    code = (
        "import sys\nfrom claudeq.config.settings import Settings\nfrom claudeq.producer.client import Client\n"
        "client = Client(Settings(_env_file=None))\n"
        "client.validate(prompt='hi')\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_FOR_SUBMITTING!r})))\n"
        "client.celery\n"
        "print('celery' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["", "True"]  # built on first use, as before


def test_a_forbidden_import_is_caught() -> None:
    source = (
        "from claudeq.worker.delivery.engine import Engine\nfrom claudeq import keys\nimport claudeq.producer.client\n"
    )
    assert claudeq_imports(source) == {"claudeq.worker.delivery.engine", "claudeq.keys", "claudeq.producer.client"}
    relative = "from ..run import outcome\nfrom .engine import Engine\nfrom ...config.settings import Settings\n"
    assert claudeq_imports(relative, ["claudeq", "worker", "delivery"]) == {
        "claudeq.worker.run",
        "claudeq.worker.delivery.engine",
        "claudeq.config.settings",
    }
    found = violations("claudeq", {"x.py": source}, ("claudeq.keys",))
    assert found == ["claudeq/x.py: claudeq.producer.client", "claudeq/x.py: claudeq.worker.delivery.engine"]
