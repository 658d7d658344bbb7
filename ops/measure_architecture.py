"""Measure what docs/architecture.md#measured states: the code base's long seams (functions over 80 lines, functions
with 8 or more parameters), store operations with a twin, loops that follow a job's events, Redis scripts' arguments
read by position, and imports between the rooms that resolve through a link in claudeq/.

What is read: every ``*.py`` file below ``worker/``, ``producer/``, ``claudeq/``, ``config/`` and ``simulator/``
(not ``tests/``, ``bench/`` or ``ops/``); the links in ``claudeq/`` that point at the top-level folders are not
followed, so each file counts once.

What is counted, with ``ast``:

- **functions**: every ``def`` and ``async def``, at any depth (methods, nested functions and closures each count on
  their own); lambdas do not.
- **lines** of a function: from its ``def`` line to its last line (``end_lineno - lineno + 1``), so decorators are
  left out and its docstring, comments, blank lines and nested functions are in. Over 80 lines is ``> 80``.
- **parameters** of a function: positional-only, ordinary and keyword-only parameters, plus ``*args`` and
  ``**kwargs`` (one each), less a first parameter named ``self`` or ``cls``. The measure is ``>= 8``.

The other counts:

- **store twins**: the store operations offered twice (``x`` beside ``x_call``, ``queue_x`` or ``x_of``, or a method
  that only sends another's call), as tests/unit/worker/test_one_io_model.py ``store_twins`` finds them.
- **event-follow loops**: functions with a loop (``for``, ``async for``, ``while``) that reads a job's events
  (``read_events``, ``XREAD``) or announces a follower (``announce_follow``) in it.
- **positional script arguments**: ``KEYS[...]``/``ARGV[...]`` (and ``unpack(ARGV...)``) in a ``.lua`` file below
  claudeq/lua/ outside its binder lines and comments (ops/lua_check.py ``positional_index_uses``).
- **imports through a link**: imports in worker/, producer/, config/ or simulator/ written as
  ``claudeq.<room>...``, which a reader follows to a link in claudeq/ rather than to the file (imports inside and
  between those rooms are relative: docs/architecture.md#who-imports-whom).

Usage: ``python ops/measure_architecture.py`` prints a summary line per count and the places over each limit, one a
line (``file:line qualified.name (N)`` for functions). ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("worker", "producer", "claudeq", "config", "simulator")
LONG_LINES = 80
MANY_PARAMS = 8


@dataclass(frozen=True)
class Function:
    """One ``def`` as the measure sees it."""

    path: str
    line: int
    name: str
    lines: int
    params: int


def source_files(root: Path = ROOT) -> list[Path]:
    """The Python files measured, each once (links are not followed)."""
    files: list[Path] = []
    for folder in FOLDERS:
        base = root / folder
        if base.is_symlink() or not base.is_dir():
            continue
        stack = [base]
        while stack:
            current = stack.pop()
            for entry in sorted(current.iterdir()):
                if entry.is_symlink():
                    continue
                if entry.is_dir():
                    stack.append(entry)
                elif entry.suffix == ".py":
                    files.append(entry)
    return sorted(files)


def parameter_count(args: ast.arguments) -> int:
    """Parameters of a def, ``*args``/``**kwargs`` one each, less a leading ``self`` or ``cls``."""
    positional = [*args.posonlyargs, *args.args]
    count = len(positional) + len(args.kwonlyargs)
    count += (args.vararg is not None) + (args.kwarg is not None)
    if positional and positional[0].arg in ("self", "cls"):
        count -= 1
    return count


class _Collector(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.scope: list[str] = []
        self.found: list[Function] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = ".".join([*self.scope, node.name])
        end = node.end_lineno or node.lineno
        self.found.append(Function(self.path, node.lineno, name, end - node.lineno + 1, parameter_count(node.args)))
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function


def functions(root: Path = ROOT) -> list[Function]:
    """Every function in the measured files."""
    found: list[Function] = []
    for path in source_files(root):
        collector = _Collector(str(path.relative_to(root)))
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found.extend(collector.found)
    return found


def measure(root: Path = ROOT) -> dict[str, list[Function]]:
    """The functions over each limit, worst first."""
    every = functions(root)
    return {
        "long_functions": sorted((f for f in every if f.lines > LONG_LINES), key=lambda f: -f.lines),
        "many_parameters": sorted((f for f in every if f.params >= MANY_PARAMS), key=lambda f: -f.params),
    }


#: What reads a job's events or announces a follower: a loop calling one of these follows a job.
FOLLOW_CALLS = frozenset({"read_events", "announce_follow", "xread"})
#: The rooms linked into claudeq/ (claudeq/worker -> ../worker, ...).
ROOMS = ("worker", "producer", "config", "simulator")


def _called(node: ast.AST) -> set[str]:
    """The names of the functions and methods called anywhere in `node`."""
    names: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


def follow_loops(root: Path = ROOT) -> list[str]:
    """`file:line name` of each function with a loop that reads a job's events or announces a follower."""
    found: list[str] = []
    for path in source_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            own = [n for n in ast.walk(node) if isinstance(n, ast.For | ast.AsyncFor | ast.While)]
            if any(_called(loop) & FOLLOW_CALLS for loop in own):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return sorted(set(found))


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def positional_script_arguments(root: Path = ROOT) -> list[str]:
    """`file (N)` of each Redis script that reads KEYS or ARGV by position outside its binder."""
    lua_check = _load("lua_check", root / "ops" / "lua_check.py")
    found = []
    for path in sorted((root / "claudeq" / "lua").rglob("*.lua")):
        uses = int(lua_check.positional_index_uses(path))
        if uses:
            found.append(f"{path.relative_to(root)} ({uses})")
    return found


def store_twins(root: Path = ROOT) -> list[str]:
    """The store operations with a twin (tests/unit/worker/test_one_io_model.py `store_twins`)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module("tests.unit.worker.test_one_io_model")
    return list(module.store_twins())


def imports_through_links(root: Path = ROOT) -> list[str]:
    """`file:line module` of each import in a room written as `claudeq.<room>...` (through a link in claudeq/)."""
    found = []
    for path in source_files(root):
        rel = path.relative_to(root)
        if rel.parts[0] not in ROOMS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "claudeq" and len(parts) > 1 and parts[1] in ROOMS:
                    found.append(f"{rel}:{node.lineno} {name}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args(argv)
    result = measure()
    places: dict[str, list[str]] = {
        key: [f"{f.path}:{f.line} {f.name} ({f.lines if key == 'long_functions' else f.params})" for f in found]
        for key, found in result.items()
    }
    places["store_twins"] = store_twins()
    places["follow_loops"] = follow_loops()
    places["positional_script_arguments"] = positional_script_arguments()
    places["imports_through_links"] = imports_through_links()
    if options.json:
        print(json.dumps({key: {"count": len(found), "places": found} for key, found in places.items()}, indent=2))
        return 0
    titles = {
        "long_functions": f"functions over {LONG_LINES} lines",
        "many_parameters": f"functions with >= {MANY_PARAMS} parameters",
        "store_twins": "store operations with a twin",
        "follow_loops": "loops that follow a job's events",
        "positional_script_arguments": "Redis scripts reading KEYS/ARGV by position outside their binder",
        "imports_through_links": "imports in the rooms written through a link in claudeq/",
    }
    for key, found in places.items():
        print(f"{titles[key]}: {len(found)}")
        for place in found:
            print(f"  {place}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
