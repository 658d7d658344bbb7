"""Compile every Redis script claudeq ships with Lua 5.1, the Lua inside Redis (docs/architecture.md#lua-scripts).

Each script of `claudeq/lua/` is resolved as Redis gets it (its includes in place) and compiled, not run, by the
Lua 5.1 that `lupa` bundles (a dev dependency, through fakeredis[lua]): a syntax error is named with its script and
line before any Redis sees it. Exit status 1 when a script does not compile.

    .venv/bin/python ops/lua_check.py
"""

from __future__ import annotations

import sys

from claudeq.lua import names, script


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
    for error in errors:
        print(error, file=sys.stderr)
    if not errors:
        print(f"{len(entry)} scripts and {len(names()) - len(entry)} function files compile under Lua 5.1")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
