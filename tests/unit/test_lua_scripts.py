"""The Redis scripts are `.lua` files (docs/architecture.md#lua-scripts): the loader resolves their includes, each
file says what it takes and answers, the stores' constants are the files' text, and no Python file holds Lua."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from claudeq import conversations, lua, schedules
from claudeq.accounts import scripts as account_scripts
from claudeq.jobs import scripts as job_scripts
from claudeq.lua import ScriptError, names, resolve, script, substitute
from claudeq.lua.results import RESULTS, Reserve, Slot
from claudeq.tenants import scripts as tenant_scripts
from claudeq.worker.store import concurrency_keys as key_scripts
from claudeq.worker.store import worker_job_scripts as worker_scripts

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "claudeq" / "lua"

#: Folders never scanned for Lua in Python: environments, build output, caches, VCS data, and the tests (which
#: hold small scripts of their own to exercise the script machinery).
NOT_SCANNED = frozenset({".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", "tests"})


def reader(files: dict[str, str]) -> Callable[[str], str]:
    return lambda name: files[name]


# ---- includes ----------------------------------------------------------------------------------------------------


def test_an_include_line_is_replaced_by_the_file_and_its_own_includes_first() -> None:
    files = {
        "a.lua": "-- A\n--!include lib/b.lua\nreturn b()\n",
        "lib/b.lua": "--!include lib/c.lua\nlocal function b() return c() end\n",
        "lib/c.lua": "local function c() return 1 end\n",
    }
    assert resolve("a.lua", reader(files)) == (
        "-- A\nlocal function c() return 1 end\nlocal function b() return c() end\nreturn b()\n"
    )


def test_a_file_named_by_two_includes_is_placed_once_at_the_first() -> None:
    files = {
        "a.lua": "--!include lib/b.lua\n--!include lib/c.lua\nreturn 1\n",
        "lib/b.lua": "--!include lib/c.lua\nB\n",
        "lib/c.lua": "C\n",
    }
    assert resolve("a.lua", reader(files)).split() == ["C", "B", "return", "1"]


@pytest.mark.parametrize(
    "files",
    [
        {"a.lua": "--!include a.lua\n"},
        {"a.lua": "--!include lib/b.lua\n", "lib/b.lua": "--!include lib/c.lua\n", "lib/c.lua": "--!include a.lua\n"},
        {"a.lua": "--!include lib/b.lua\n", "lib/b.lua": "--!include lib/b.lua\n"},
    ],
)
def test_an_include_cycle_is_refused(files: dict[str, str]) -> None:
    with pytest.raises(ScriptError, match="include cycle"):
        resolve("a.lua", reader(files))


@pytest.mark.parametrize("name", ["../secret.lua", "/etc/x.lua", "lib/settle", "lib/../../x.lua"])
def test_a_script_name_outside_the_folder_or_not_lua_is_refused(name: str) -> None:
    with pytest.raises(ScriptError):
        script(name)


def test_an_include_inside_a_line_or_a_comment_text_is_not_an_include() -> None:
    files = {"a.lua": "x = 1 --!include lib/b.lua\n-- see --!include lib/b.lua\n"}
    assert resolve("a.lua", reader(files)) == files["a.lua"]


# ---- result codes ------------------------------------------------------------------------------------------------


def test_a_result_placeholder_becomes_its_integer_and_other_braces_stay() -> None:
    text = "if g ~= {{Slot.OPEN}} then return { {{Reserve.RESERVED}}, w} end\nlocal t = {{a.b}, {ARGV[1], 'x'}}\n"
    assert substitute(text, RESULTS) == "if g ~= 1 then return { -5, w} end\nlocal t = {{a.b}, {ARGV[1], 'x'}}\n"


@pytest.mark.parametrize("text", ["return {{Slot.NOPE}}", "return {{Nope.FULL}}"])
def test_a_placeholder_naming_no_result_code_is_refused(text: str) -> None:
    with pytest.raises(ScriptError, match="no such result code"):
        substitute(text, RESULTS)


def test_the_scripts_answer_with_the_codes_python_reads() -> None:
    assert "return -9" in script("job/start.lua")  # START_LOST, as the worker compares it
    assert Slot.START_LOST == -9 and Slot.ACQUIRED == Slot.OPEN == 1 and Reserve.OVER_BUDGET == -4
    for name in names():
        assert "{{" + "Slot." not in script(name) and "{{" + "Reserve." not in script(name), name


# ---- the shipped files -------------------------------------------------------------------------------------------


def test_every_shipped_script_resolves_and_leaves_no_include_line() -> None:
    assert names() == sorted(str(p.relative_to(LUA)) for p in LUA.rglob("*.lua"))
    for name in names():
        assert "--!include" not in script(name), name


def test_every_script_file_starts_with_a_header_and_an_entry_script_says_keys_argv_and_result() -> None:
    for name in names():
        text = (LUA / name).read_text()
        header = text.split("\n\n", 1)[0]
        assert header.startswith("-- "), name
        assert all(line.startswith("--") for line in header.splitlines()), name
        if not name.startswith("lib/"):
            for part in ("KEYS:", "ARGV:", "Result:"):
                assert re.search(rf"^-- {part}", header, re.MULTILINE), f"{name}: no {part} in its header"


def test_every_lib_file_is_included_somewhere_and_every_entry_script_is_run_by_a_store() -> None:
    texts = {name: (LUA / name).read_text() for name in names()}
    included = {m for text in texts.values() for m in lua.INCLUDE.findall(text)}
    assert {n for n in names() if n.startswith("lib/")} == included
    constants = {
        value
        for module in (
            account_scripts,
            job_scripts,
            tenant_scripts,
            worker_scripts,
            conversations,
            schedules,
            key_scripts,
        )
        for key, value in vars(module).items()
        if key.isupper() and isinstance(value, str)
    }
    unused = [n for n in names() if not n.startswith("lib/") and script(n) not in constants]
    assert unused == []


def test_the_stores_constants_are_the_files_text() -> None:
    assert script("account/acquire.lua") == account_scripts.ACQUIRE
    assert script("tenant/settle.lua") == tenant_scripts.SETTLE
    assert script("job/finish.lua") == worker_scripts.FINISH
    assert script("conversation/release.lua") == conversations.RELEASE
    # FINISH takes in the admission, settle and write functions, each once.
    finish = worker_scripts.FINISH
    for function in ("settle", "write", "admit", "bump"):
        assert finish.count(f"local function {function}(") == 1, function


def python_files_with_lua(root: Path) -> list[str]:
    """The .py files under `root` (outside NOT_SCANNED) whose text calls `redis.call(`: Lua kept in Python."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part in NOT_SCANNED or part.endswith(".egg-info") for part in parts[:-1]):
            continue
        if path.is_symlink() or any((root / Path(*parts[:i])).is_symlink() for i in range(1, len(parts))):
            continue  # the rooms linked into claudeq/ are scanned where they live
        if "redis.call(" in path.read_text(errors="replace"):
            found.append(str(path.relative_to(root)))
    return found


def test_no_python_file_holds_lua() -> None:
    assert python_files_with_lua(ROOT) == []


def test_a_python_file_holding_lua_is_caught(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "scripts.py").write_text('X = """\\nreturn redis.call(\'GET\', KEYS[1])\\n"""\n')
    (tmp_path / "pkg" / "fine.py").write_text("X = script('job/claim.lua')\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("INCR = \"return redis.call('INCR', KEYS[1])\"\n")
    assert python_files_with_lua(tmp_path) == ["pkg/scripts.py"]


def test_the_lint_compiles_every_script_and_names_one_that_does_not_compile() -> None:
    from ops.lua_check import compile_errors

    assert compile_errors({name: script(name) for name in names()}) == []
    [error] = compile_errors({"job/broken.lua": "-- header\nlocal x = = 1\n", "job/fine.lua": "return 1\n"})
    assert error.startswith("job/broken.lua: job/broken.lua:2:")
