"""How the command line prints (docs/cli.md#output): what it prints is never read as markup, and output that is not
a terminal's is never wrapped or cut.

Jobs' prompts, errors, names and reasons are users' text: rich would read `[/b]` in one as a closing tag (and crash)
or drop `[[sim: …]]` as an unknown style. So the consoles here print every string literally; colour comes only
from `Text` objects built in code. A pipe gets whole values: no wrapping at 80 columns, tables as plain columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Line breaks and tabs inside a table cell: a piped row stays one line.
_BREAKS = re.compile(r"[\r\n\t\v\f]+")

Cell = str | Text


class CliConsole(Console):
    """A Console printing strings as they are (no markup, emoji codes or highlighting); not on a terminal, it
    never wraps or crops a line."""

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, highlight=False, emoji=False, markup=False)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Console.print, with these defaults."""
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        kwargs.setdefault("emoji", False)
        if not self.is_terminal:
            kwargs.setdefault("soft_wrap", True)  # no wrapping, no cropping: a pipe gets every character
        super().print(*objects, **kwargs)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line from plain strings and (string, style) pairs; no string is read as markup."""
    return Text.assemble(*parts)


def one_line(value: str) -> str:
    """`value` on one line: its line breaks and tabs become single spaces."""
    return _BREAKS.sub(" ", value)


def print_table(console: Console, headers: Sequence[str], rows: Iterable[Sequence[Cell]]) -> None:
    """A table: on a terminal, rich's (cells wrap to fit); otherwise plain columns separated by two spaces, one
    row a line, every value whole."""
    if console.is_terminal:
        table = Table(*headers)
        for row in rows:
            table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in row))
        console.print(table)
        return
    lines = [
        list(headers),
        *([one_line(cell.plain if isinstance(cell, Text) else cell) for cell in row] for row in rows),
    ]
    widths = [max(cell_len(line[i]) for line in lines) for i in range(len(headers))]
    for line in lines:
        cells = [cell + " " * (widths[i] - cell_len(cell)) for i, cell in enumerate(line)]
        console.print("  ".join(cells).rstrip(), soft_wrap=True)
