"""The distribution a producer installs: one top-level import name, `claudeq`, and nothing generic beside it; and
what `pip install claudeq` brings: the producer, without the fleet's packages (docs/architecture.md#packaging).

Builds the wheel of this checkout (in a copy, so the tree is left as it is), installs it into a fresh virtualenv
whose only other packages are this environment's dependencies, and imports from there as a user would. Then installs
it with pip itself, dependencies resolved from the configured index, into a virtualenv of its own (no system site
packages): what a web app that only enqueues jobs gets, used against the real Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import redis

from claudeq.broker import job_id_of
from claudeq.config.settings import Settings
from claudeq.conversations import ConversationStore, Turn
from claudeq.keys import Keys
from claudeq.models import utcnow
from claudeq.producer.client import make_store
from claudeq.script_calls import run_call
from claudeq.transcripts import RedisSessionStore
from tests.support.tree import ROOT
from tests.unit.testing.test_isolation import BLOCKED, EXAMPLE

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


def run_in(python: Path, code: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `code` with `python`, isolated from PYTHONPATH, the user site and the current directory (`env`: the
    whole environment, else this process's)."""
    return subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120, env=env
    )


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


#: Distributions of the fleet that `pip install claudeq` must not bring (normalised names).
FLEET_ONLY = {"claude-agent-sdk", "prometheus-client", "celery", "kombu", "mcp", "uvicorn", "starlette", "tenacity"}


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would point Python or claudeq elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDEQ_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def _pip(python: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m pip ARGS`, on the index pip is configured with here (as a user's `pip install` would be)."""
    return subprocess.run(
        [str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, env=_clean_env()
    )


def _normalised(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.fixture(scope="module")
def base_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a fresh virtualenv (no system site packages) into which `pip install <wheel>` installed
    claudeq and its base dependencies."""
    env_dir = tmp_path_factory.mktemp("base-venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    done = _pip(python, "install", "-q", str(wheel))
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def _installed(python: Path) -> set[str]:
    done = _pip(python, "list", "--format", "json", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {_normalised(d["name"]) for d in json.loads(done.stdout)}


def _claudeq(
    python: Path, *args: str, cwd: Path, script: str = "claudeq", **env: str
) -> subprocess.CompletedProcess[str]:
    """The base install's `claudeq` console script (or another, `script`), with only the settings in `env`."""
    return subprocess.run(
        [str(python.parent / script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env=_clean_env(**env),
    )


def test_pip_install_claudeq_brings_no_sdk_no_prometheus_no_celery(base_python: Path) -> None:
    installed = _installed(base_python)
    assert "claudeq" in installed
    assert installed & FLEET_ONLY == set()


def test_the_base_install_offers_the_producer_surface(base_python: Path, tmp_path: Path) -> None:
    code = (
        "import json, sys, claudeq\n"
        "light = sorted(m for m in sys.modules if m.startswith('claudeq'))\n"
        "from claudeq import Client, AsyncClient, JobSpec, JobRecord, ClaudeqError, JobSpecError, JobNotFound\n"
        "assert issubclass(JobSpecError, ClaudeqError) and issubclass(JobNotFound, ClaudeqError)\n"
        "JobSpec(prompt='hi')\n"
        "print(json.dumps({'version': claudeq.__version__, 'light': light, 'client': Client.__module__,\n"
        "                  'async': AsyncClient.__module__, 'record': JobRecord.__module__}))\n"
    )
    done = run_in(base_python, code, tmp_path, env=_clean_env())
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen == {
        "version": "0.1.0",
        "light": ["claudeq", "claudeq.errors"],
        "client": "claudeq.producer.client",
        "async": "claudeq.producer.client",
        "record": "claudeq.models",
    }


def test_claudeq_help_runs_on_the_base_install(base_python: Path, tmp_path: Path) -> None:
    done = _claudeq(base_python, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for command in ("submit", "wait", "status", "top", "mcp", "web", "api"):
        assert command in done.stdout


def test_submit_from_the_base_install_reaches_the_real_redis(
    base_python: Path, settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The Python client and the command line of the base install submit to Redis (this test's own key prefix and
    queue, deleted afterwards by the `redis_client` fixture); `claudeq top` shows the queue."""
    env = {
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps([settings.queue]),
    }
    code = (
        "import sys\nfrom claudeq import Client\n"
        "job = Client().submit(prompt='from a producer', idempotency_key='pkg-1')\n"
        "print(job.id, job.record().status)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu', 'claude_agent_sdk')))\n"
    )
    done = run_in(base_python, code, tmp_path, env=_clean_env(**env))
    assert done.returncode == 0, done.stderr[-2000:]
    first, loaded = done.stdout.splitlines()
    from_python, status = first.split()
    assert status == "queued"
    assert loaded == "[]"

    cli = _claudeq(base_python, "submit", "from the shell", "--json", cwd=tmp_path, **env)
    assert cli.returncode == 0, cli.stderr[-2000:]
    from_cli = json.loads(cli.stdout)["id"]

    store = make_store(settings, redis_client)
    for job_id in (from_python, from_cli):
        assert run_call(store.get_call(job_id)).status == "queued"
    waiting = {job_id_of(raw) for raw in redis_client.lrange(settings.queue, 0, -1)}
    assert waiting == {from_python, from_cli}  # the messages a worker consumes

    top = _claudeq(base_python, "top", "--once", cwd=tmp_path, **env)
    assert top.returncode == 0, top.stderr[-2000:]
    assert "queued 2" in top.stdout


def test_commands_needing_an_extra_name_it_on_the_base_install(
    base_python: Path, settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    env = {"CLAUDEQ_REDIS_URL": settings.redis_url, "CLAUDEQ_KEY_PREFIX": settings.key_prefix}
    conversations = ConversationStore.from_settings(settings, redis_client)
    turn = Turn(job_id="j1", status="succeeded", session_id="s1", finished_at=utcnow())
    run_call(conversations.record_turn_call("pkg-conv", turn, True))
    for script, args, extra in (
        ("claudeq", ["mcp"], "mcp"),
        ("claudeq", ["web"], "web"),
        ("claudeq", ["api"], "web"),
        ("claudeq", ["exporter", "--port", "0"], "worker"),
        ("claudeq-worker", ["--check"], "worker"),
        ("claudeq-sim", ["--port", "0"], "worker"),
    ):
        done = _claudeq(base_python, *args, cwd=tmp_path, script=script, **env)
        assert done.returncode == 1, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, args
        assert done.stderr.strip().endswith(f"pip install 'claudeq[{extra}]'"), (args, done.stderr)


def test_conversation_delete_works_on_the_base_install(
    base_python: Path, settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Deleting a conversation deletes its sessions' transcripts through the session store, which needs no SDK."""
    env = {"CLAUDEQ_REDIS_URL": settings.redis_url, "CLAUDEQ_KEY_PREFIX": settings.key_prefix}
    conversations = ConversationStore.from_settings(settings, redis_client)
    turn = Turn(job_id="j1", status="succeeded", session_id="s1", finished_at=utcnow())
    run_call(conversations.record_turn_call("pkg-conv", turn, True))
    entry = {"type": "user", "uuid": "u1", "sessionId": "s1", "message": {"role": "user", "content": "hi"}}

    async def write() -> None:
        sessions = RedisSessionStore.from_settings(settings)
        try:
            await sessions.append({"project_key": "pkg-project", "session_id": "s1"}, [entry])  # type: ignore[list-item]
        finally:
            await sessions.aclose()

    asyncio.run(write())
    transcript = Keys(settings.key_prefix).session_entries("pkg-project", "s1", None)
    assert redis_client.exists(transcript)
    done = _claudeq(base_python, "conversation", "delete", "pkg-conv", "--json", cwd=tmp_path, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"name": "pkg-conv", "deleted": True, "sessions": ["s1"]}
    assert conversations.info("pkg-conv") is None
    assert not redis_client.exists(transcript)


#: What the testing extra adds to the base install may not include the fleet's heavy parts (tenacity is light and
#: runs the worker's real retry policy in the kit).
NOT_IN_TESTING = FLEET_ONLY - {"tenacity"}


@pytest.fixture(scope="module")
def testing_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv into which pip installed `claudeq[testing]` and pytest, as a user's project would."""
    env_dir = tmp_path_factory.mktemp("testing-venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    done = _pip(python, "install", "-q", f"{wheel}[testing]", "pytest")
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def test_the_testing_extra_brings_no_sdk_celery_prometheus_or_mcp(testing_python: Path) -> None:
    installed = _installed(testing_python)
    assert {"claudeq", "fakeredis", "lupa", "pytest"} <= installed
    assert installed & NOT_IN_TESTING == set()


def test_a_users_tests_run_on_the_testing_install_cut_off_from_redis_cli_network_and_processes(
    testing_python: Path, tmp_path: Path
) -> None:
    """The example project's tests (they import only `claudeq` and `claudeq.testing`, and use the plugin's
    `claudeq_fleet` fixture) pass on the testing install, in an interpreter where every connection and every child
    process raises (tests/unit/testing/test_isolation.py), with no SDK, CLI, Celery or Redis server installed."""
    env = _clean_env(
        PATH=str(tmp_path),
        HOME=str(tmp_path),
        CLAUDEQ_REDIS_URL="redis://127.0.0.1:1/0",
        CLAUDEQ_CLI_PATH=str(tmp_path / "no-such-claude"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    done = subprocess.run(
        [str(testing_python), "-I", "-c", BLOCKED, str(EXAMPLE)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert " passed" in out and "failed" not in out, out[-4000:]
    assert "BLOCKED-ATTEMPTS 0 []" in out, out[-4000:]
    assert "claude_agent_sdk" not in out


def test_the_wheel_holds_the_run_views_pages(wheel: Path) -> None:
    """`claudeq web` renders templates and serves static files read from the package: the wheel must hold them."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    pages = ("base.html", "jobs.html", "job.html", "fleet.html", "login.html", "transcript.html", "_event.html")
    for page in (*pages, "_change.html"):
        assert f"claudeq/producer/web/templates/{page}" in names, page
    assert {"claudeq/producer/web/static/app.js", "claudeq/producer/web/static/style.css"} <= names


def test_the_wheel_holds_every_worker_package_and_the_cli_wrapper(wheel: Path) -> None:
    """The worker's packages (docs/architecture.md#the-worker-by-concern) and the script its launcher starts the CLI
    through (worker/run/claude-pdeathsig.sh, found beside launcher.py) are in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    packages = sorted(p.name for p in (ROOT / "worker").iterdir() if (p / "__init__.py").is_file())
    assert packages == ["accounts", "background", "delivery", "metrics", "passthrough", "run", "store", "workspace"]
    for package in packages:
        assert f"claudeq/worker/{package}/__init__.py" in names, package
    assert {"claudeq/worker/run/launcher.py", "claudeq/worker/run/claude-pdeathsig.sh"} <= names


def test_the_worker_extra_brings_the_sdk(base_python: Path, wheel: Path, tmp_path: Path) -> None:
    """What `pip install 'claudeq[worker]'` would add to the base install, as pip resolves it (a dry run: the SDK's
    wheel, with its bundled CLI, is not unpacked)."""
    report = tmp_path / "report.json"
    done = _pip(base_python, "install", "--dry-run", "-q", "--report", str(report), f"{wheel}[worker]")
    assert done.returncode == 0, done.stderr[-3000:]
    adds = {_normalised(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert {"claude-agent-sdk", "prometheus-client", "celery", "mcp", "tenacity", "uvicorn"} <= adds


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
        "from claudeq.worker.store import worker_job_scripts as job_scripts\n"
        "print(json.dumps({'names': names(), 'finish': job_scripts.FINISH == script('job/finish.lua'),\n"
        "                  'file': __import__('claudeq.lua').lua.__file__}))\n"
    )
    done = run_in(wheel_python, code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert Path(seen["file"]).resolve().is_relative_to(wheel_python.parent.parent.resolve())
    assert ["claudeq/lua/" + name for name in seen["names"]] == shipped
    assert seen["finish"] is True
