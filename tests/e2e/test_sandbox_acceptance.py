"""Acceptance of the run sandbox: a run sees its workspace, reaches its pass-through, holds no other secret.

Real worker processes — once as root, once as a worker that is not root — the real CLI, the simulator scripting the
tool calls (docs/simulator.md). Every file tool walks every path form towards what a run must never read: a file
only root may read, a world-readable file outside the roots, another run's directory, another tenant's workspace (a
workspace root too: the hook allows it, only the sandbox hides it) and the worker's token file. A shell job tries the
same with cat, ls and find, and reaches for Redis and `claudeq web` with curl and a raw socket. Nothing is read,
written or reached; the jobs still succeed and do their work inside their workspace; a shell job's environment holds
none of the configured secrets, one of each kind (docs/architecture.md#the-run-sandbox).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.run_dirs import non_root_worker, open_base
from tests.support.worker_proc import FAST_E2E, SimAccount, settings_env, worker_env

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62507  # the runs' shared group (outside the default run uid range 61000-61999)
WORKER_UID = 62990  # the worker that is not root (outside the run uids and the groups)
FILE_TOOLS = ["Read", "Glob", "Grep", "LS", "Edit", "Write", "NotebookEdit"]
#: One secret of each kind the settings and the tenants file name (accounts' tokens come from SimAccount).
SECRET_VARS = {
    "CQT_ALPHA_WEBHOOK_SECRET": "whsec_cqtacceptancewebhook5d2c",
    "CQT_ALPHA_MCP_TOKEN": "cqt-acceptance-mcp-token-48aa",
    "CQT_EXTRA_SECRET": "cqt-acceptance-extra-secret-1b7e",
}
WEB_TOKEN = "cqt-acceptance-web-token-6f10"
WEBHOOK_SECRET = "whsec_cqtacceptancefleet93e1"
TENANTS = """
[[tenants]]
name = "alpha"
webhook_secret_env = "CQT_ALPHA_WEBHOOK_SECRET"
mcp_token_env = "CQT_ALPHA_MCP_TOKEN"

[[tenants]]
name = "beta"
"""


@pytest.fixture(params=["root", "non-root"])
def worker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("a", max_concurrency=4), SimAccount("b", max_concurrency=2), SimAccount("f", max_concurrency=4)]


@dataclass
class Place:
    """The test's directories and the files a run must never read (by content marker and by name marker)."""

    base: Path
    alpha: Path  # alpha's workspace: the jobs' cwd
    beta: Path  # another tenant's workspace (a workspace root too)
    outside: Path  # world-readable, outside the roots
    rootonly: Path  # readable by root alone
    secrets: Path  # the worker's token file's folder
    runs: Path  # the run root
    unique: str

    def target(self, kind: str) -> Path:
        folder = {"outside": self.outside, "rootonly": self.rootonly, "token": self.secrets, "beta": self.beta}[kind]
        return folder / f"{kind}-name-{self.unique}.txt"

    def content(self, kind: str) -> str:
        return f"content-{kind}-{self.unique}"


@pytest.fixture
def place(unique: str, worker_kind: str) -> Iterator[Place]:
    owner = 0 if worker_kind == "root" else WORKER_UID
    with open_base("cqt-accept-") as base:
        alpha, beta = base / "ws-alpha", base / "ws-beta"
        for ws in (alpha, beta):
            ws.mkdir()
            os.chown(ws, 0, WORKSPACE_GID)
            ws.chmod(0o2770)
        spot = Place(
            base, alpha, beta, base / "outside", base / "rootonly", base / "secrets", base / "runs", unique=unique
        )
        spot.outside.mkdir(mode=0o755)
        spot.rootonly.mkdir(mode=0o700)
        spot.secrets.mkdir(mode=0o755)
        spot.runs.mkdir(mode=0o711)
        os.chown(spot.runs, owner, owner)  # the worker makes its runs' directories there
        for kind, mode, file_owner, gid in (
            ("outside", 0o644, 0, 0),
            ("rootonly", 0o600, 0, 0),
            ("token", 0o600, owner, owner),
            ("beta", 0o660, 0, WORKSPACE_GID),
        ):
            path = spot.target(kind)
            path.write_text(spot.content(kind) + "\n")
            os.chown(path, file_owner, gid)
            path.chmod(mode)
        inside = alpha / "inside.txt"
        inside.write_text(f"inside-{unique}\n")
        os.chown(inside, 0, WORKSPACE_GID)
        inside.chmod(0o660)
        notebook = alpha / "nb.ipynb"
        cell = {
            "cell_type": "code",
            "id": "c1",
            "metadata": {},
            "source": ["1"],
            "outputs": [],
            "execution_count": None,
        }
        notebook.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        os.chown(notebook, 0, WORKSPACE_GID)
        notebook.chmod(0o660)
        for name, to in (("outside", spot.outside), ("rootonly", spot.rootonly), ("secrets", spot.secrets)):
            (alpha / f"link-{name}").symlink_to(to, target_is_directory=True)
        (alpha / "link-beta").symlink_to(beta, target_is_directory=True)
        (alpha / "link-runs").symlink_to(spot.runs, target_is_directory=True)
        yield spot


@pytest.fixture
def accounts_file(place: Place, accounts: list[SimAccount], simulator: Any, worker_kind: str) -> Path:
    token = place.secrets / "f.token"
    token.write_text(accounts[2].token_value)
    owner = 0 if worker_kind == "root" else WORKER_UID
    os.chown(token, owner, owner)
    token.chmod(0o600)
    lines = []
    for account in accounts:
        source = f'token_file = "{token}"' if account.name == "f" else f'token_env = "{account.token_env}"'
        lines += ["[[accounts]]", f'name = "{account.name}"', 'kind = "oauth"', source]
        lines += [f"max_concurrency = {account.max_concurrency}", f'base_url = "{simulator.base_url}"', ""]
    path = place.base / "accounts.toml"
    path.write_text("\n".join(lines))
    path.chmod(0o644)
    return path


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, place: Place) -> Settings:
    tenants = place.base / "tenants.toml"
    tenants.write_text(TENANTS)
    tenants.chmod(0o644)
    policy = WorkerPolicy(
        allowed_tools=[*FILE_TOOLS, "Bash"],
        workspace_roots=[place.alpha, place.beta],
        run_groups=[WORKSPACE_GID],
    )
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        tenants_file=tenants,
        run_root=place.runs,
        policy=policy,
        secret_env=["CQT_EXTRA_SECRET"],
        web_token=WEB_TOKEN,
        webhook_secret=WEBHOOK_SECRET,
        event_tool_result_chars=50_000,
        **{**FAST_E2E, "concurrency": 4},
    )


@pytest.fixture
def web(settings: Settings, place: Place) -> Iterator[int]:
    """`claudeq web` on the loopback, as an operator runs it; yields its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", "web", "--port", str(port)],
        env={**worker_env(settings, []), **settings_env(settings), **SECRET_VARS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run_until(lambda: _answers(port) or proc.poll() is not None, 60, 0.2, what="claudeq web listening")
        assert proc.poll() is None, "claudeq web exited"
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/login", timeout=1)
        return True
    except httpx.TransportError:
        return False


@pytest.fixture
def worker(workers: WorkerFactory, worker_kind: str, place: Place) -> Any:
    env = {**SECRET_VARS, "CLAUDEQ_WEB_TOKEN": WEB_TOKEN, "CLAUDEQ_WEBHOOK_SECRET": WEBHOOK_SECRET}
    if worker_kind == "root":
        return workers(extra_env=env)
    extra, prefix = non_root_worker(place.base, WORKER_UID, WORKSPACE_GID)
    return workers(extra_env={**env, **extra}, prefix=prefix)


def _forms(path: Path, place: Place) -> dict[str, str]:
    """Every way of writing `path` that a file tool might be given."""
    rel_base = os.path.relpath(path, place.base)
    return {
        "absolute": str(path),
        "relative": os.path.relpath(path, place.alpha),
        "tilde": f"~/../../{rel_base}",  # the run's HOME is its run directory, two below the base
        "tilde-user": f"~root/..{path}",
        "dotdot": f"{place.alpha}/../{rel_base}",
        "leading-space": f" {path}",
        "trailing-space": f"{path} ",
        "tab": f"\t{path}",
        "newline": f"\n{path}",
        "nul": f"{path}\x00",
        "proc-root": f"/proc/self/root{path}",
    }


def _link(path: Path, place: Place) -> str:
    """`path` through the workspace's symlink that points out at its folder."""
    name = {place.outside: "outside", place.rootonly: "rootonly", place.secrets: "secrets", place.beta: "beta"}
    folder = path if path.is_dir() else path.parent
    if folder in name:
        tail = "" if path.is_dir() else f"/{path.name}"
        return f"{place.alpha}/link-{name[folder]}{tail}"
    return f"{place.alpha}/link-runs/{path.relative_to(place.runs)}"


def _paths(target: Path, place: Place, every_form: bool) -> list[str]:
    forms = _forms(target, place)
    chosen = list(forms.values()) if every_form else [forms["absolute"], forms["dotdot"], forms["proc-root"]]
    return [*chosen, _link(target, place)]


def _calls(tool: str, place: Place, victim_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """The job of one file tool: a call inside the workspace that must work, then every probe."""
    files = [place.target(k) for k in ("outside", "rootonly", "token", "beta")] + [victim_dir / "system-prompt.txt"]
    dirs = [place.outside, place.rootonly, place.secrets, place.beta, victim_dir]
    calls: list[tuple[str, dict[str, Any]]] = []
    inside = place.alpha / "inside.txt"

    def file_input(path: str) -> dict[str, Any]:
        if tool == "Read":
            return {"file_path": path}
        if tool == "Edit":
            return {"file_path": path, "old_string": "content", "new_string": "pwned"}
        if tool == "Write":
            return {"file_path": path, "content": f"pwned-{place.unique}\n"}
        return {"notebook_path": path, "new_source": "pwned", "cell_type": "code", "edit_mode": "insert"}

    def dir_input(path: str) -> dict[str, Any]:
        if tool == "Glob":
            return {"pattern": "*", "path": path}
        if tool == "Grep":
            return {"pattern": "content-", "path": path, "output_mode": "content"}
        return {"path": path}

    if tool in ("Glob", "Grep", "LS"):
        calls.append((tool, {**dir_input(str(place.alpha)), **({"pattern": "inside-"} if tool == "Grep" else {})}))
        for i, folder in enumerate(dirs):
            calls += [(tool, dir_input(p)) for p in _paths(folder, place, every_form=i == 0)]
        climbing = ["../outside/*", "**/../../outside/*", "{..,x}/outside/*", f"{place.outside}/*", "~/../../*"]
        key = "pattern" if tool == "Glob" else "glob"
        calls += [(tool, {"pattern": "content-" if tool == "Grep" else p, key: p}) for p in climbing if tool != "LS"]
    else:
        if tool == "Edit":
            calls.append(("Read", {"file_path": str(inside)}))
            calls.append(("Edit", {"file_path": str(inside), "old_string": "inside", "new_string": "edited"}))
        elif tool == "Write":
            calls.append(("Write", {"file_path": str(place.alpha / "made.txt"), "content": "made\n"}))
        elif tool == "NotebookEdit":
            notebook = str(place.alpha / "nb.ipynb")
            calls.append(("Read", {"file_path": notebook}))
            calls.append((tool, {**file_input(notebook), "new_source": f"made-by-notebook-{place.unique}"}))
        else:
            calls.append((tool, file_input(str(inside))))
        for i, target in enumerate(files):
            calls += [(tool, file_input(p)) for p in _paths(target, place, every_form=i == 0)]
        calls.append((tool, file_input(str(place.outside / f"new-{place.unique}.txt"))))
    return calls


SHELL = r"""
for f in {files}; do echo "[cat]"; cat "$f" 2>&1 | head -c 300; echo; done
echo '[ls]'; ls -la {dirs} 2>&1 | head -c 2000; echo
echo '[find]'; find / -xdev \( -name '*-name-{unique}*' -o -name 'system-prompt.txt' \) 2>/dev/null | head -20
echo '[redis]'; printf 'PING\r\n' | curl -s -m 3 telnet://127.0.0.1:6379 2>&1; echo " rc=$?"
echo '[web]'; curl -s -m 3 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{web}/login 2>&1; echo
echo '[socket]'; for port in 6379 {web}; do
  python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3); print('connected')" \
    $port 2>&1 | tail -1
done
echo '[env]'; env | cut -d= -f1 | sort | tr '\n' ' '; echo
echo '[values]'; env | while IFS= read -r line; do printf '%s' "${{line#*=}}" | sha256sum | cut -c1-64; done
echo '[made]'; echo made-by-shell > {alpha}/shell.txt && echo written
"""


def test_a_run_reads_reaches_and_holds_nothing_outside_its_sandbox(
    client: Client,
    worker: Any,
    worker_kind: str,
    place: Place,
    accounts: list[SimAccount],
    web: int,
) -> None:
    started = time.monotonic()
    victim = client.submit(
        prompt="[[sim: stall 90]] another tenant's run",
        tools="read-only",
        tenant="beta",
        cwd=str(place.beta),
        system_prompt=place.content("victim"),
    )
    # Its run directory: its own (`claudeq-run-<job>-…`), or a warm CLI's it runs on (a worker that is not root runs
    # read-only jobs warm, in a sandbox kept with the CLI); either holds its system prompt.
    victim_dir = run_until(lambda: _run_dir_with(place.runs, place.content("victim")), 60, 0.1, what="victim's dir")
    jobs = {}
    for tool in FILE_TOOLS:
        calls = _calls(tool, place, victim_dir)
        prompt = " ".join(f"[[sim: tool {name} {json.dumps(args)}]]" for name, args in calls) + f" probe {tool}"
        jobs[tool] = (client.submit(prompt=prompt, tools=[*FILE_TOOLS], tenant="alpha", cwd=str(place.alpha)), calls)
    secrets = [*SECRET_VARS.values(), WEB_TOKEN, WEBHOOK_SECRET, *(a.token_value for a in accounts)]
    files = [place.target(k) for k in ("outside", "rootonly", "token", "beta")] + [victim_dir / "system-prompt.txt"]
    command = SHELL.format(
        files=" ".join(str(f) for f in files),
        dirs=" ".join(str(d) for d in (place.outside, place.rootonly, place.secrets, place.beta, victim_dir)),
        unique=place.unique,
        web=web,
        alpha=place.alpha,
    )
    shell = client.submit(
        prompt=f"[[sim: tool Bash {json.dumps({'command': command, 'description': 'probe'})}]] probe the shell",
        tools="shell",
        tenant="alpha",
        cwd=str(place.alpha),
    )

    contents = [place.content(k) for k in ("outside", "rootonly", "token", "beta", "victim")]
    names = [f"{k}-name-{place.unique}" for k in ("outside", "rootonly", "token", "beta")] + ["system-prompt.txt"]
    for tool, (job, calls) in jobs.items():
        record = client.wait(job.id, timeout=240, poll_s=0.2)
        assert record.status == "succeeded", (tool, record.error)
        results = [e.data for e in client.events(job.id) if e.type == "tool_result"]
        assert len(results) == len(calls), (tool, len(results), len(calls))
        first = str(results[0]["text"])
        for (name, args), result in zip(calls, results, strict=True):
            text = str(result["text"])
            for secret in (*contents, *secrets):
                assert secret not in text, f"{worker_kind} worker: {name} {args!r} read {secret!r}: {text}"
            if tool in ("Glob", "Grep", "LS") and args != calls[0][1]:
                for listed in names:
                    assert listed not in text, f"{worker_kind} worker: {name} {args!r} listed {listed}: {text}"
        # The job's own work inside its workspace went through.
        if tool in ("Read", "Grep"):
            assert f"inside-{place.unique}" in first, (tool, first)
        if tool == "Glob":
            assert "inside.txt" in first, first
    assert (place.alpha / "made.txt").read_text() == "made\n"
    assert (place.alpha / "inside.txt").read_text() == f"edited-{place.unique}\n"
    assert f"made-by-notebook-{place.unique}" in (place.alpha / "nb.ipynb").read_text()

    record = client.wait(shell.id, timeout=120, poll_s=0.2)
    assert record.status == "succeeded", record.error
    [result] = [e.data for e in client.events(shell.id) if e.type == "tool_result"]
    text = str(result["text"])
    for secret in (*contents, *secrets):
        assert secret not in text, f"{worker_kind} worker: the shell job read {secret!r}:\n{text}"
    sections = _sections(text)
    assert "PATH" in sections["env"].split(), text
    secret_names = [*SECRET_VARS, "CLAUDEQ_WEB_TOKEN", "CLAUDEQ_WEBHOOK_SECRET", "CLAUDEQ_REDIS_URL"]
    for name in (*secret_names, *(a.token_env for a in accounts)):
        assert name not in sections["env"].split(), f"{name} in a shell job's environment:\n{text}"
    hashes = set(sections["values"].split())  # the job's values, hashed: its command holds no secret itself
    assert len(hashes) > 5, text
    for secret in secrets:
        assert hashlib.sha256(secret.encode()).hexdigest() not in hashes, "a secret's value is in the job's env"
    assert sections["find"] == "", text
    assert "PONG" not in sections["redis"] and "NOAUTH" not in sections["redis"], text
    assert sections["web"] == "000", text
    assert "connected" not in sections["socket"], text
    assert sections["made"] == "written" and (place.alpha / "shell.txt").read_text() == "made-by-shell\n"

    # Nothing outside was changed or made, and the other run was untouched.
    for kind in ("outside", "rootonly", "token", "beta"):
        assert place.target(kind).read_text() == place.content(kind) + "\n", kind
    assert sorted(p.name for p in place.outside.iterdir()) == [f"outside-name-{place.unique}.txt"]
    client.cancel(victim.id)
    assert client.wait(victim.id, timeout=60, poll_s=0.1).status == "cancelled"
    probes = sum(len(c) for _, c in jobs.values()) + 1
    print(f"{worker_kind} worker: {probes} probes in {time.monotonic() - started:.0f} s")


def _run_dir_with(runs: Path, system_prompt: str) -> Path | None:
    """The run directory whose system prompt file holds `system_prompt`."""
    for prompt in runs.glob("claudeq-*/system-prompt.txt"):
        try:
            if system_prompt in prompt.read_text():
                return prompt.parent
        except OSError:
            continue
    return None


def _sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]") and line[1:-1].isalpha():
            current = line[1:-1]
            out.setdefault(current, [])
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}
