"""The tests import exactly the checkout they sit in: never another copy through an editable install or the cwd.

A copy of the tree whose tests silently exercised the original would let any break in the copy pass. The worker
processes the end-to-end tests start are checked in tests/e2e/test_import_tree.py.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tree import ROOT, tree_env, under_root

MODULES = (
    "claudeq",
    "claudeq.worker.delivery.engine",
    "claudeq.producer.cli",
    "claudeq.config.settings",
    "claudeq.simulator",
)


def test_root_is_this_checkout() -> None:
    assert (ROOT / "pyproject.toml").is_file()
    assert under_root(__file__)


@pytest.mark.parametrize("name", MODULES)
def test_in_process_imports_come_from_this_checkout(name: str) -> None:
    module = importlib.import_module(name)
    assert under_root(module.__file__), f"{name} imported from {module.__file__}, not from {ROOT}"


def test_every_loaded_claudeq_module_comes_from_this_checkout() -> None:
    importlib.import_module("claudeq.worker.delivery.engine")
    elsewhere = {
        name: getattr(module, "__file__", None)
        for name, module in list(sys.modules.items())
        if (name == "claudeq" or name.startswith(("claudeq.", "tests."))) and getattr(module, "__file__", None)
        if not under_root(module.__file__)
    }
    assert not elsewhere, f"imported from outside {ROOT}: {elsewhere}"


def test_the_rooms_are_never_imported_under_a_second_top_level_name() -> None:
    # `worker`, `producer`... as top-level names would be second copies of claudeq.worker... (or a test folder).
    for name in ("worker", "producer", "config", "simulator"):
        module = sys.modules.get(name)
        assert module is None or not under_root(getattr(module, "__file__", None)), f"{name} imported from {ROOT}"


def test_a_subprocess_started_elsewhere_imports_this_checkout(tmp_path: Path) -> None:
    script = (
        f"import importlib, json; print(json.dumps({{n: importlib.import_module(n).__file__ for n in {MODULES!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=tree_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    assert sorted(files) == sorted(MODULES)
    assert all(under_root(f) for f in files.values()), files
