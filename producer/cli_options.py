"""A command's options as one dataclass: typer reads a parameter per option from a function's signature, so a
command with many options would be a function with as many parameters. `options_command(Options)` instead gives
typer a signature made of the dataclass's fields (each annotated with its `typer.Option`/`typer.Argument` as a
parameter would be), and calls the command's body with one `Options` instance.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

Options = TypeVar("Options")


def options_signature(options: type[Any]) -> inspect.Signature:
    """The signature typer reads: one keyword parameter per field of the dataclass `options`, in field order, with
    its annotation (its typer.Option / typer.Argument) and its default."""
    hints = typing.get_type_hints(options, include_extras=True)
    params = []
    for field in dataclasses.fields(options):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        params.append(
            inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[field.name], default=default)
        )
    return inspect.Signature(params, return_annotation=None)


def options_command(options: type[Options]) -> Callable[[Callable[[Options], None]], Callable[..., None]]:
    """Decorate `body(opts: Options)`: the result is a typer command taking `options`'s fields as its options (and
    `as_json`, if a field, as a keyword `_guard` reads); its name and help are the body's."""
    signature = options_signature(options)

    def wrap(body: Callable[[Options], None]) -> Callable[..., None]:
        def command(**given: Any) -> None:
            body(options(**given))

        command.__name__ = body.__name__
        command.__qualname__ = body.__qualname__
        command.__doc__ = body.__doc__
        command.__module__ = body.__module__
        command.__signature__ = signature  # type: ignore[attr-defined]
        return command

    return wrap
