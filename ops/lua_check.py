"""Compile every Redis script claudeq ships with Lua 5.1, the Lua inside Redis (docs/architecture.md#lua-scripts).

Each script of `claudeq/lua/` is resolved as Redis gets it (its includes in place) and compiled, not run, by the
Lua 5.1 that `lupa` bundles (a dev dependency, through fakeredis[lua]): a syntax error is named with its script and
line before any Redis sees it. Each script's binder (the lines at its top that name its KEYS and ARGV,
docs/architecture.md#script-arguments) is read too: it must agree with the script's header, and the script's body
must use no KEYS or ARGV but through the binder's names (`positional_index_uses`; a count is printed while some
remain). Exit status 1 when a script does not compile or a binder disagrees with its header.

    .venv/bin/python ops/lua_check.py
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from claudeq.lua import names, script

LUA = Path(__file__).resolve().parents[1] / "claudeq" / "lua"

#: A binder line: one argument (`local job = KEYS[1]`, `local n = tonumber(ARGV[7])`), or a list of them
#: (lib/args.lua): the rest (`local fields = args_list(ARGV, 11)`), as many as a count bound before says
#: (`args_list(ARGV, 11, 10 + n)`), or a fixed number (`args_list(KEYS, 3, 6)`).
BINDER = re.compile(
    r"^local (?P<name>\w+) = (?:tonumber\()?(?P<kind>KEYS|ARGV)\[(?P<index>\d+)\]\)?$"
    r"|^local (?P<list>\w+) = args_list\((?P<lkind>KEYS|ARGV), (?P<start>\d+(?: \+ \w+)?)"
    r"(?:, (?P<end>\d+(?: \+ \w+)?))?\)$"
)
#: A use of the script's arguments by position: KEYS or ARGV (or a function's `argv`) named outside a binder.
POSITIONAL = re.compile(r"\b(?:KEYS|ARGV|argv)\b")
#: An argument's name in a header's KEYS or ARGV part: in backquotes.
HEADER_NAME = re.compile(r"`(\w+)`")


@dataclass
class Binder:
    """A script's binder: its KEYS and ARGV names in order, and what is wrong with its positions."""

    keys: list[str]
    argv: list[str]
    errors: list[str]


def _code(line: str) -> str:
    return re.sub(r"--.*$", "", line).strip()


def binder(text: str) -> Binder:
    """The binder lines of a script's own text (`text`), checked for positions that follow each other: 1, 2, … up
    to a list, which starts where the one before ended (`11`, or `11 + n` after `args_list(ARGV, 11, 10 + n)`)."""
    found = Binder([], [], [])
    at = {"KEYS": (1, ""), "ARGV": (1, "")}  # the next position of each: a number, plus a count bound before
    for line in text.splitlines():
        m = BINDER.match(line.strip())
        if not m:
            continue
        kind = m.group("kind") or m.group("lkind")
        base, plus = at[kind]
        expected = f"{base} + {plus}" if plus else str(base)
        if m.group("name"):
            name, start = m.group("name"), m.group("index")
            at[kind] = (base + 1, plus)
        else:
            name, start = m.group("list"), m.group("start")
            if m.group("end") and m.group("end").isdigit():  # a list of a fixed length
                at[kind] = (int(m.group("end")) + 1, plus)
                if plus or int(m.group("end")) < base:
                    found.errors.append(f"{name}: a fixed list ends at {m.group('end')}")
            elif m.group("end"):
                count = m.group("end").split(" + ")[1]
                if plus or m.group("end") != f"{base - 1} + {count}":
                    found.errors.append(f"{name}: a counted list ends at {m.group('end')}")
                at[kind] = (base, count)
            else:
                at[kind] = (base, "-")  # the rest: nothing may follow
        if start != expected or plus == "-":
            found.errors.append(f"{name}: at {kind} {start}, expected {expected}")
        (found.keys if kind == "KEYS" else found.argv).append(name)
    return found


def header_names(text: str, part: str) -> list[str]:
    """The names in backquotes of the `-- KEYS:` or `-- ARGV:` part (`part`) of a script's header: its first line
    and the indented lines that go on from it."""
    out: list[str] = []
    inside = False
    for line in text.split("\n\n", 1)[0].splitlines():
        if line.startswith(f"-- {part}:"):
            inside = True
        elif not line.startswith("--  "):
            inside = False
        if inside:
            out.extend(HEADER_NAME.findall(line))
    return out


def positional_index_uses(path: Path) -> int:
    """How many times a script file (its own text, not its includes) names KEYS or ARGV outside its binder lines
    and comments: the uses of its arguments by position."""
    return _positional(path.read_text(encoding="utf-8"))


def _positional(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if not BINDER.match(line.strip()):
            count += len(POSITIONAL.findall(_code(line)))
    return count


def binder_errors(name: str, text: str) -> list[str]:
    """`name: error` for a script whose binder is out of order or names what its header does not (none for a function
    file, or a script not yet converted: one that still uses KEYS or ARGV by position)."""
    bound = binder(text)
    if name.startswith("lib/") or not (bound.keys or bound.argv) or _positional(text):
        return []
    errors = [f"{name}: {e}" for e in bound.errors]
    for part, names_ in (("KEYS", bound.keys), ("ARGV", bound.argv)):
        said = header_names(text, part)
        if said != names_:
            errors.append(f"{name}: the header's {part} say {said}, the binder {names_}")
    return errors


def compile_errors(texts: dict[str, str]) -> list[str]:
    """`name: error` for each of `texts` (script name -> text) that Lua 5.1 does not compile."""
    from lupa import lua51  # type: ignore[import-untyped]

    loadstring = lua51.LuaRuntime().globals().loadstring
    errors = []
    for name, text in sorted(texts.items()):
        compiled = loadstring(text, "=" + name)
        if isinstance(compiled, tuple) and compiled[0] is None:
            errors.append(f"{name}: {compiled[1]}")
    return errors


def main() -> int:
    entry = [name for name in names() if not name.startswith("lib/")]
    errors = compile_errors({name: script(name) for name in names()})
    errors += [e for name in names() for e in binder_errors(name, (LUA / name).read_text(encoding="utf-8"))]
    for error in errors:
        print(error, file=sys.stderr)
    if not errors:
        print(f"{len(entry)} scripts and {len(names()) - len(entry)} function files compile under Lua 5.1")
        left = sum(positional_index_uses(LUA / name) for name in names())
        if left:
            print(f"{left} uses of KEYS or ARGV by position outside the binders")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
