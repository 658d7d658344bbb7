"""A dataclass's fields as a function's parameters: what typer (`producer/cli_options.py`) and the MCP server
(`producer/mcp_server.py`) read a command's or a tool's arguments from, when one object carries them."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any


def field_parameters(options: type[Any]) -> list[inspect.Parameter]:
    """One keyword parameter per field of the dataclass `options`, in field order, with its annotation (evaluated,
    `Annotated` metadata kept) and its default."""
    hints = typing.get_type_hints(options, include_extras=True)
    params = []
    for field in dataclasses.fields(options):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(field.name, kind, annotation=hints[field.name], default=default))
    return params
