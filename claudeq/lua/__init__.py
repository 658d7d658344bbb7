"""The Redis scripts: every Lua script claudeq runs is a `.lua` file in this folder (docs/architecture.md#lua-scripts).

`script(name)` is the text Redis gets for `name` (a path under this folder, `account/acquire.lua`). The functions
several scripts share live in files of their own (`lib/`), and a script takes them in with an include line

    --!include lib/settle.lua

which is replaced by that file's text (its own includes resolved first). A file is taken in once per script however
many of its includes name it (the first one places it), and a cycle of includes is refused. A script names the
codes it answers with by the enums of `claudeq.lua.results` (`return {{Slot.RESERVED}}`): each placeholder is
replaced by the member's integer. Each text is resolved once per process: the store modules
(`claudeq/accounts/_scripts.py`, …) read their constants from here at import.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import IntEnum
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from claudeq.lua.results import RESULTS

#: An include line: `--!include <path under this folder>.lua`, alone on its line.
INCLUDE = re.compile(r"^--!include[ \t]+(\S+)[ \t]*$", re.MULTILINE)
#: A result code by name: `{{Enum.MEMBER}}` (an enum of `claudeq.lua.results`, a member in upper case).
PLACEHOLDER = re.compile(r"\{\{([A-Z]\w*)\.([A-Z][A-Z0-9_]*)\}\}")


class ScriptError(ValueError):
    """A script cannot be resolved: an include cycle, a path that is not a `.lua` file under the folder, or a
    placeholder that names no result code."""


def _read(name: str, root: Traversable) -> str:
    if not name.endswith(".lua") or name.startswith("/") or ".." in name.split("/"):
        raise ScriptError(f"{name!r}: a script is a .lua path under the scripts folder")
    node = root
    for part in name.split("/"):
        node = node / part
    return node.read_text(encoding="utf-8")


def resolve(name: str, read: Callable[[str], str]) -> str:
    """The text of script `name` with every include line replaced by the included file's text (resolved the same
    way), each file placed once (at its first include); `read` gives a file's own text. A file that includes itself,
    directly or not, raises ScriptError."""
    placed: set[str] = set()

    def expand(current: str, stack: tuple[str, ...]) -> str:
        if current in stack:
            raise ScriptError("include cycle: " + " -> ".join((*stack, current)))
        placed.add(current)
        text = read(current)

        def include(match: re.Match[str]) -> str:
            target = match.group(1)
            if target in placed and target not in stack and target != current:
                return ""  # placed already, by an earlier include
            return expand(target, (*stack, current)).rstrip("\n")

        return INCLUDE.sub(include, text)

    return expand(name, ())


def substitute(text: str, results: dict[str, type[IntEnum]]) -> str:
    """`text` with each `{{Enum.MEMBER}}` replaced by that member's integer (`results`: the enums by name); a
    placeholder naming no member raises ScriptError."""

    def value(match: re.Match[str]) -> str:
        enum, member = results.get(match.group(1)), match.group(2)
        if enum is None or member not in enum.__members__:
            raise ScriptError(f"{match.group(0)}: no such result code")
        return str(int(enum.__members__[member]))

    return PLACEHOLDER.sub(value, text)


@cache
def script(name: str) -> str:
    """The text Redis runs for script `name` (a path under this folder, e.g. `account/acquire.lua`)."""
    root = files(__name__)
    return substitute(resolve(name, lambda n: _read(n, root)), RESULTS)


def names() -> list[str]:
    """Every script file under this folder, as `script` names them (`lib/…` included), sorted."""
    out: list[str] = []

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".lua"):
                out.append(prefix + child.name)

    walk(files(__name__), "")
    return sorted(out)
