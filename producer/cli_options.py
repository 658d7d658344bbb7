"""A command's options as one dataclass: typer reads a parameter per option from a function's signature, so a
command with many options would be a function with as many parameters. `options_command(Options)` instead gives
typer a signature made of the dataclass's fields (each annotated with its `typer.Option`/`typer.Argument` as a
parameter would be), and calls the command's body with one `Options` instance.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .signatures import field_parameters

Options = TypeVar("Options")


def options_command(options: type[Options]) -> Callable[[Callable[[Options], None]], Callable[..., None]]:
    """Decorate `body(opts: Options)`: the result is a typer command taking `options`'s fields as its options (and
    `as_json`, if a field, as a keyword `_guard` reads); its name and help are the body's."""
    signature = inspect.Signature(field_parameters(options), return_annotation=None)

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
