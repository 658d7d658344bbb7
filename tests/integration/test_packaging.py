"""The distribution a producer installs: one top-level import name, `claudeq`, and nothing generic beside it.

Builds the wheel of this checkout (in a copy, so the tree is left as it is), installs it into a fresh virtualenv
whose only other packages are this environment's dependencies, and imports from there as a user would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.tree import ROOT

#: What the wheel is built from (the rooms are linked into claudeq/, see pyproject.toml).
SOURCES = ("pyproject.toml", "README.md", "claudeq", "config", "producer", "worker", "simulator")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = list(out.glob("claudeq-*.whl"))
    return built


@pytest.fixture(scope="module")
def wheel_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a fresh virtualenv holding the wheel (unpacked: a pure wheel installs by unzipping), with
    this environment's dependencies reachable but not its editable claudeq."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(purelib)
    # A plain path entry: the dependencies' directory is searched, but its .pth files (the editable install's
    # finder among them) are not run, so `claudeq` can only come from the wheel.
    (purelib / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_in(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` with `python`, isolated from PYTHONPATH, the user site and the current directory."""
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_wheel_holds_claudeq_and_nothing_else_at_the_top(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [top_level] = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["claudeq"]
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"claudeq"}
    for room in ("config", "producer", "worker", "simulator"):
        assert f"claudeq/{room}/__init__.py" in names


def test_installed_wheel_imports_as_claudeq_only(wheel_python: Path, tmp_path: Path) -> None:
    code = (
        "import importlib, importlib.metadata as md, json\n"
        "import claudeq.producer.client\n"
        "dist = md.distribution('claudeq')\n"
        "failed = {}\n"
        "for name in ('config', 'worker', 'producer', 'simulator'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        failed[name] = False\n"
        "    except ImportError:\n"
        "        failed[name] = True\n"
        "print(json.dumps({'client': claudeq.producer.client.__file__, 'top': dist.read_text('top_level.txt'),\n"
        "                  'failed': failed}))\n"
    )
    done = run_in(wheel_python, code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert Path(seen["client"]).resolve().is_relative_to(wheel_python.parent.parent.resolve())
    assert seen["top"].split() == ["claudeq"]
    assert seen["failed"] == {"config": True, "worker": True, "producer": True, "simulator": True}


def test_the_wheel_holds_every_lua_script_and_the_installed_loader_reads_them(
    wheel: Path, wheel_python: Path, tmp_path: Path
) -> None:
    lua = ROOT / "claudeq" / "lua"
    shipped = sorted(f"claudeq/lua/{p.relative_to(lua)}" for p in lua.rglob("*.lua"))
    assert shipped
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(n for n in archive.namelist() if n.endswith(".lua")) == shipped
    code = (
        "import json\n"
        "from claudeq.lua import names, script\n"
        "from claudeq.worker import job_scripts\n"
        "print(json.dumps({'names': names(), 'finish': job_scripts.FINISH == script('job/finish.lua'),\n"
        "                  'file': __import__('claudeq.lua').lua.__file__}))\n"
    )
    done = run_in(wheel_python, code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert Path(seen["file"]).resolve().is_relative_to(wheel_python.parent.parent.resolve())
    assert ["claudeq/lua/" + name for name in seen["names"]] == shipped
    assert seen["finish"] is True
