"""Every run with tools in a sandbox of its own: it sees its workspace, reaches its pass-through, holds no other secret.

Real worker (as root, as this suite runs), the real CLI and the simulator scripting its tool calls
(docs/workers.md#security-defaults). Three attacks that worked before the sandbox: a file tool's path with leading
whitespace, which the hook read as relative and the CLI trimmed to an absolute path outside the roots; the secrets
the tenants file names, in every shell job's environment and unredacted in what claudeq stored; and a shell job
reaching loopback services (Redis, any other port on the worker's host).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62504  # the runs' shared group (outside the default run uid range 61000-61999)
#: One secret of each kind the tenants file and the settings name (never a real one).
TENANT_SECRETS = {
    "CQT_ALPHA_WEBHOOK_SECRET": "whsec_cqtalphawebhooksecret7f3e",
    "CQT_ALPHA_MCP_TOKEN": "cqt-alpha-mcp-91bd",
}
TENANTS = """
[[tenants]]
name = "alpha"
webhook_secret_env = "CQT_ALPHA_WEBHOOK_SECRET"
mcp_token_env = "CQT_ALPHA_MCP_TOKEN"

[[tenants]]
name = "beta"

[[tenants]]
name = "default"
"""


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory any uid may enter (pytest's tmp_path is under a 0700 directory): runs, workspace, outside."""
    with open_base("cqt-sandbox-") as path:
        yield path


@pytest.fixture
def workspace(base: Path) -> Path:
    return group_workspace(base / "work", WORKSPACE_GID)


@pytest.fixture
def outside(base: Path, unique: str) -> Path:
    """A world-readable folder outside the workspace roots, holding a world-readable file."""
    path = base / "outside"
    path.mkdir(mode=0o755)
    (path / "world.txt").write_text(f"world-readable-{unique}\n")
    (path / "world.txt").chmod(0o644)
    return path


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, base: Path, workspace: Path) -> Settings:
    tenants = base / "tenants.toml"
    tenants.write_text(TENANTS)
    policy = WorkerPolicy(
        allowed_tools=["Read", "Glob", "Grep", "Edit", "Write", "Bash"],
        workspace_roots=[workspace],
        run_groups=[WORKSPACE_GID],
    )
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        tenants_file=tenants,
        run_root=base / "runs",
        policy=policy,
        **FAST_E2E,
    )


def _sections(text: str) -> dict[str, str]:
    """`[name] ...` blocks of a command's output."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"\[(\w+)\]\n?(.*?)(?=\n\[\w+\]|\Z)", text, re.S)}


def _run(client: Client, prompt: str, **fields: Any) -> tuple[JobRecord, list[dict[str, Any]]]:
    job = client.submit(prompt=prompt, **fields)
    record = client.wait(job.id, timeout=120, poll_s=0.1)
    assert record.status == "succeeded", record.error
    return record, [e.data for e in client.events(job.id) if e.type == "tool_result"]


def _shell(client: Client, command: str, workspace: Path, **fields: Any) -> tuple[JobRecord, str, str]:
    """Run `command` in a shell job; (record, its tool result's text, everything stored about the job)."""
    directive = json.dumps({"command": command, "description": "probe"})
    record, results = _run(client, f"[[sim: tool Bash {directive}]] probe", tools="shell", cwd=str(workspace), **fields)
    [result] = results
    stored = json.dumps([record.public(), [e.model_dump(mode="json") for e in client.events(record.id)]])
    return record, str(result["text"]), stored


def test_file_tools_with_whitespace_before_the_path_stay_in_the_workspace(
    client: Client, workers: WorkerFactory, workspace: Path, outside: Path, unique: str
) -> None:
    """Before: the hook read " /outside" as relative to the cwd (inside the roots) and allowed it; the CLI trimmed
    it and searched /outside, whose world-readable file the run uid could read. Now it is refused as it is."""
    workers()
    probes = [
        ("Grep", {"pattern": "world-readable", "path": f" {outside}", "output_mode": "content"}),
        ("Grep", {"pattern": "world-readable", "path": f"\t{outside}", "output_mode": "content"}),
        ("Glob", {"pattern": "*.txt", "path": f"\n{outside}"}),
        ("Read", {"file_path": f" {outside}/world.txt"}),
    ]
    prompt = " ".join(f"[[sim: tool {tool} {json.dumps(args)}]]" for tool, args in probes) + " look outside"
    record, results = _run(client, prompt, tools="read-only", cwd=str(workspace))
    assert len(results) == len(probes), results
    for (tool, args), result in zip(probes, results, strict=True):
        text = str(result["text"])
        assert f"world-readable-{unique}" not in text and "world.txt" not in text.replace(f"{outside}/world.txt", ""), (
            tool,
            args,
            text,
        )
        assert result["is_error"], (tool, args, text)
    assert f"world-readable-{unique}" not in json.dumps(record.public())


def test_a_shell_job_holds_no_secret_the_tenants_file_or_the_settings_name(
    client: Client, workers: WorkerFactory, workspace: Path
) -> None:
    """Before: `alpha`'s webhook secret and MCP token were in `beta`'s shell job's environment, and stored in
    `beta`'s record and events as they were. Now the CLI's environment is an allow-list, and every secret the
    settings or the tenants file name is redacted from what claudeq stores, even when a job reads it from a file."""
    workers(extra_env=TENANT_SECRETS)
    leak = workspace / "leak.txt"
    leak.write_text("\n".join(TENANT_SECRETS.values()) + "\n")
    leak.chmod(0o664)
    names = " ".join(TENANT_SECRETS)
    command = (
        "echo '[env]'; env | cut -d= -f1 | sort | tr '\\n' ' '; echo"
        f"; echo '[values]'; for n in {names}; do printenv $n || echo unset; done"
        f"; echo '[file]'; cat {leak}"
    )
    _, text, stored = _shell(client, command, workspace, tenant="beta")
    found = _sections(text)
    assert "PATH" in found["env"].split(), text  # the command did print its environment
    assert found["values"].split() == ["unset"] * len(TENANT_SECRETS), text
    for name, value in TENANT_SECRETS.items():
        assert name not in found["env"].split(), f"{name} is in a shell job's environment:\n{text}"
        assert value not in stored, f"{name}'s value is stored in the job's record or events"
    assert found["file"].split() == ["***"] * len(TENANT_SECRETS), text  # read from a file: redacted, not lost


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"loopback-service-answered")

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def loopback_service() -> Iterator[tuple[int, list[str]]]:
    """An HTTP service on the worker's loopback (like `claudeq web`): (port, the paths it was asked for)."""
    hits: ClassVar[list[str]] = []
    handler = type("Recorder", (_Recorder,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()


def test_a_shell_job_reaches_no_loopback_service(
    client: Client, workers: WorkerFactory, workspace: Path, loopback_service: tuple[int, list[str]]
) -> None:
    """Before: a shell job reached Redis and any other service on the worker's loopback. Now it has a network of
    its own: nothing there but its pass-through."""
    workers()
    port, hits = loopback_service
    command = "\n".join(
        [
            "echo '[redis]'; printf 'PING\\r\\n' | curl -s -m 3 telnet://127.0.0.1:6379 2>&1; echo \" rc=$?\"",
            f"echo '[http]'; curl -s -m 3 http://127.0.0.1:{port}/from-a-run 2>&1; echo \" rc=$?\"",
            f"echo '[socket]'; python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); "
            "print('connected')\" 2>&1 | tail -1",
        ]
    )
    _, text, _ = _shell(client, command, workspace)
    found = _sections(text)
    assert set(found) >= {"redis", "http", "socket"}, text
    assert "PONG" not in found["redis"] and "NOAUTH" not in found["redis"], text
    assert "loopback-service-answered" not in found["http"], text
    assert "connected" not in found["socket"].splitlines(), text
    assert hits == [], f"a run reached a loopback service: {hits}"


@pytest.fixture
def other_service() -> Iterator[tuple[int, list[str]]]:
    """A second loopback service, which the operator does not name."""
    hits: list[str] = []
    handler = type("Recorder", (_Recorder,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()


def test_network_hosts_open_exactly_the_named_hosts_to_a_shell_job(
    client: Client,
    workers: WorkerFactory,
    settings: Settings,
    workspace: Path,
    loopback_service: tuple[int, list[str]],
    other_service: tuple[int, list[str]],
) -> None:
    """CLAUDEQ_POLICY__NETWORK_HOSTS: the hole an operator opens for shell jobs is the named hosts, through the
    worker's proxy (the job's HTTP_PROXY); another host, Redis and a raw socket still reach nothing."""
    port, hits = loopback_service
    other, other_hits = other_service
    workers(policy=settings.policy.model_copy(update={"network_hosts": [f"127.0.0.1:{port}"]}))
    command = "\n".join(
        [
            f"echo '[named]'; curl -s -m 5 --noproxy '' http://127.0.0.1:{port}/named 2>&1; echo",
            f"echo '[other]'; curl -s -m 5 --noproxy '' -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{other}/x",
            "echo; echo '[redis]'; curl -s -m 5 --noproxy '' -p -o /dev/null -w '%{http_connect}' "
            "http://127.0.0.1:6379/ 2>&1; echo",
            f"echo '[raw]'; python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); "
            "print('connected')\" 2>&1 | tail -1",
        ]
    )
    _, text, _ = _shell(client, command, workspace)
    found = _sections(text)
    assert found["named"] == "loopback-service-answered", text
    assert hits == ["/named"]
    assert found["other"] == "403" and other_hits == [], text
    assert found["redis"] == "403", text
    assert "connected" not in found["raw"].splitlines(), text
