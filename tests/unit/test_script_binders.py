"""Each Redis script names its arguments once (docs/architecture.md#script-arguments): its header, the binder at its
top and its Python argument object (`claudeq.script_args.ScriptArgs`) agree, name for name and in order, and its body
reads the binder's names, never KEYS or ARGV by position.

`positional_index_uses(path)` counts what is left to convert in one `.lua` file (the coordinator's measure)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import claudeq.accounts
import claudeq.conversations
import claudeq.jobs
import claudeq.schedules
import claudeq.tenants
import claudeq.worker.store.concurrency_keys
import claudeq.worker.store.worker_job_scripts
from claudeq.lua import names
from claudeq.script_args import ScriptArgs, key

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "claudeq" / "lua"
#: The modules whose ScriptArgs classes the checks below find (each script's constants and arguments live together).
MODULES = (
    claudeq.accounts.scripts,
    claudeq.conversations,
    claudeq.jobs.scripts,
    claudeq.schedules,
    claudeq.tenants.scripts,
    claudeq.worker.store.concurrency_keys,
    claudeq.worker.store.worker_job_scripts,
)


def _lua_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lua_check", ROOT / "ops" / "lua_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


lua_check = _lua_check()


def positional_index_uses(path: Path) -> int:
    """How many times `path` (a `.lua` file) names KEYS or ARGV outside its binder lines and comments."""
    return int(lua_check.positional_index_uses(path))


def _classes() -> dict[str, type[ScriptArgs]]:
    found: dict[str, type[ScriptArgs]] = {}
    todo = list(ScriptArgs.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "SCRIPT" in vars(cls):
            assert cls.SCRIPT not in found, f"two argument classes for {cls.SCRIPT}"
            found[cls.SCRIPT] = cls
    return found


def _text(name: str) -> str:
    return (LUA / name).read_text(encoding="utf-8")


def test_the_argument_classes_are_the_stores_modules() -> None:
    classes = _classes()
    assert classes, "no ScriptArgs class found"
    for cls in classes.values():
        assert any(vars(m).get(cls.__name__) is cls for m in MODULES), cls


@pytest.mark.parametrize("name", [n for n in names() if not n.startswith("lib/")])
def test_a_script_header_binder_and_argument_class_agree(name: str) -> None:
    text = _text(name)
    bound = lua_check.binder(text)
    cls = _classes().get(name)
    if cls is None:  # not converted yet
        assert positional_index_uses(LUA / name) > 0, f"{name} binds its arguments but no ScriptArgs class names them"
        return
    assert lua_check.binder_errors(name, text) == []
    assert bound.keys == cls.names(True) and bound.argv == cls.names(False)
    assert lua_check.header_names(text, "KEYS") == cls.names(True)
    assert lua_check.header_names(text, "ARGV") == cls.names(False)
    assert positional_index_uses(LUA / name) == 0, f"{name}: KEYS or ARGV by position outside its binder"


def test_the_scripts_use_their_arguments_by_position_no_more_than_before() -> None:
    """A ratchet: the count only goes down (docs/architecture.md#script-arguments)."""
    total = sum(positional_index_uses(LUA / name) for name in names())
    assert total <= LEFT, f"{total} positional uses of KEYS/ARGV (was {LEFT}): lower LEFT when it goes down"


#: KEYS/ARGV named by position outside binders, across claudeq/lua/ (0 when every script is converted).
LEFT = 0


# ---- the binder reader itself --------------------------------------------------------------------------------


def test_a_binder_reads_names_in_order_with_counted_lists_and_a_rest() -> None:
    text = "\n".join(
        [
            "-- X (a store): x.",
            "-- KEYS: `job`, `lines`, `sets`.",
            "-- ARGV: `job_id`, `n`,",
            "--       `events`, `fields`.",
            "-- Result: 1",
            "",
            "local job = KEYS[1]",
            "local lines = args_list(KEYS, 2, 5)",
            "local sets = args_list(KEYS, 6)",
            "local job_id = ARGV[1]",
            "local n = tonumber(ARGV[2])",
            "local events = args_list(ARGV, 3, 2 + n)",
            "local fields = args_list(ARGV, 3 + n)",
            "return 1",
        ]
    )
    bound = lua_check.binder(text)
    assert (bound.keys, bound.argv, bound.errors) == (["job", "lines", "sets"], ["job_id", "n", "events", "fields"], [])
    assert lua_check.binder_errors("x/x.lua", text) == []


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (["local a = ARGV[1]", "local b = ARGV[3]"], "b: at ARGV 3, expected 2"),
        (["local a = args_list(ARGV, 1)", "local b = ARGV[2]"], "b: at ARGV 2"),
        (["local n = ARGV[1]", "local e = args_list(ARGV, 2, 2 + n)"], "e: a counted list ends at 2 + n"),
    ],
)
def test_a_binder_out_of_order_is_named(lines: list[str], error: str) -> None:
    assert any(e.startswith(error) for e in lua_check.binder("\n".join(lines)).errors)


def test_a_header_that_names_other_arguments_than_the_binder_is_an_error() -> None:
    text = "-- X: x.\n-- KEYS: `job`.\n-- ARGV: `fence`, `job_id`\n-- Result: 1\n\nlocal job = KEYS[1]\n"
    text += "local job_id = ARGV[1]\nlocal fence = ARGV[2]\n"
    assert lua_check.binder_errors("x/x.lua", text) == [
        "x/x.lua: the header's ARGV say ['fence', 'job_id'], the binder ['job_id', 'fence']"
    ]


def test_positional_uses_count_code_outside_the_binder_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "x.lua"
    path.write_text("-- KEYS: ARGV[1]\nlocal job = KEYS[1]\nif ARGV[2] then f(KEYS, #ARGV) end -- ARGV[9]\n")
    assert positional_index_uses(path) == 3


def test_an_argument_object_spreads_its_fields_into_keys_and_argv_in_order() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True, kw_only=True)
    class Args(ScriptArgs):
        job: str = key()
        job_id: str
        sets: tuple[str, ...] = key()
        fields: tuple[str, ...]

    args = Args(job="j", job_id="1", sets=("a", "b"), fields=("f", "v"))
    assert (args.keys(), args.argv()) == (["j", "a", "b"], ["1", "f", "v"])
    assert (Args.names(True), Args.names(False)) == (["job", "sets"], ["job_id", "fields"])
