"""Measure the code base's long seams: functions over 80 lines and functions with 8 or more parameters.

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

Usage: ``python ops/measure_architecture.py`` prints a summary line per count and the functions over each limit,
one a line as ``file:line qualified.name (N)``. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args(argv)
    result = measure()
    if options.json:
        print(json.dumps({key: [asdict(f) for f in found] for key, found in result.items()}, indent=2))
        return 0
    titles = {
        "long_functions": (f"functions over {LONG_LINES} lines", "lines"),
        "many_parameters": (f"functions with >= {MANY_PARAMS} parameters", "params"),
    }
    for key, found in result.items():
        title, field = titles[key]
        print(f"{title}: {len(found)}")
        for f in found:
            print(f"  {f.path}:{f.line} {f.name} ({getattr(f, field)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
