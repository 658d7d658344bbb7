"""Which extra brings which optional package, for the one-line error a command gives when its extra is missing.

`pip install claudeq` is the producer; the fleet's packages come with `claudeq[worker]` and `claudeq mcp`'s with
`claudeq[mcp]` (pyproject.toml, docs/architecture.md#packaging). The commands that need them import them when they
run, never when the command line loads.
"""

from __future__ import annotations

import json
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
