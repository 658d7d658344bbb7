"""Which extra brings which optional package, for the one-line error a command gives when its extra is missing.

`pip install claudeq` is the producer; the fleet's packages come with `claudeq[worker]` and `claudeq mcp`'s with
`claudeq[mcp]` (pyproject.toml, docs/architecture.md#packaging). The commands that need them import them when they
run, never when the command line loads. The fleet's own console scripts (`claudeq-worker`, `claudeq-sim`) are
installed with the base too, so they start through `worker_main` and `sim_main` here, which say the same.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

#: The exit code (the command line's "runtime error", README.md#submitting-jobs).
EXIT_ERROR = 1

#: Top-level import name -> the extra that installs it.
EXTRA_OF: dict[str, str] = {
    "mcp": "mcp",
    "claude_agent_sdk": "worker",
    "prometheus_client": "worker",
    "celery": "worker",
    "kombu": "worker",
    "tenacity": "worker",
    "httpx": "worker",
    "starlette": "worker",
    "uvicorn": "worker",
    "jinja2": "web",
    "fastapi": "web",
}


def missing_extra(command: str, exc: ModuleNotFoundError) -> str:
    """The error line for `command` run without the extra that brings the module `exc` names; any other missing
    module is a bug, not an install choice: `exc` is raised again."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        raise exc
    return f"{command} needs the {extra!r} extra ({top} is not installed): pip install 'claudeq[{extra}]'"


def exit_missing(command: str, exc: ModuleNotFoundError, as_json: bool = False) -> NoReturn:
    """Print `missing_extra`'s line the way the commands print an error (on stdout as JSON with `as_json`) and
    exit 1. The line is not wrapped, so the pip command in it can be copied whole."""
    message = missing_extra(command, exc)
    if as_json:
        print(json.dumps({"error": message}))
    else:
        Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_ERROR)


def _fleet_main(command: str, module: str) -> int:
    """Run `module.main()`; a fleet package missing at any point of it ends in `missing_extra`'s line and exit 1."""
    try:
        code: int = importlib.import_module(module).main()
    except ModuleNotFoundError as exc:
        print(f"error: {missing_extra(command, exc)}", file=sys.stderr)
        return EXIT_ERROR
    return code


def worker_main() -> int:
    """`claudeq-worker` (claudeq.worker.main)."""
    return _fleet_main("claudeq-worker", "claudeq.worker.main")


def sim_main() -> int:
    """`claudeq-sim` (claudeq.simulator.__main__)."""
    return _fleet_main("claudeq-sim", "claudeq.simulator.__main__")
