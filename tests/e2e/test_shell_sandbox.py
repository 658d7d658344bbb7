"""Claude Code's own sandbox as a second layer for shell jobs (CLAUDEQ_POLICY__SHELL_SANDBOX, bubblewrap on Linux).

Real worker (as root, with claudeq's own sandbox off: CLAUDEQ_POLICY__SANDBOX=off, which tests/e2e/test_run_sandbox.py
covers), the real CLI, the simulator: a shell job under its run uid runs a Bash command that tries
what the run uid alone still allows — writing outside its cwd in a world-writable place, and reaching the network
(the Redis port on this host). With the sandbox off the command does both. With it on the command never runs
unsandboxed: either the sandbox runs it (writes only in the workspace, no network) or, where the sandbox cannot
start (no bubblewrap; or, as measured with CLI 2.1.332 here, its network bridges fail to come up), the CLI refuses
to run it at all (failIfUnavailable, allowUnsandboxedCommands off).
docs/cli-behaviour.md#file-tool-paths-and-the-shell-sandbox."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62503


@pytest.fixture
def base() -> Iterator[Path]:
    with open_base("cqt-sandbox-") as path:
        yield path


@pytest.fixture
def workspace(base: Path) -> Path:
    return group_workspace(base / "work", WORKSPACE_GID)


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, base: Path, workspace: Path) -> Settings:
    policy = WorkerPolicy(
        allowed_tools=["Read", "Glob", "Grep", "Edit", "Write", "Bash"],
        workspace_roots=[workspace],
        run_groups=[WORKSPACE_GID],
        sandbox="off",  # Claude Code's sandbox on its own: it cannot start inside claudeq's (no nested namespaces)
    )
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, run_root=base / "runs", policy=policy, **FAST_E2E
    )


def _sections(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"\[(\w+)\]\n?(.*?)(?=\n\[\w+\]|\Z)", text, re.S)}


def _probe(client: Client, workspace: Path, unique: str, label: str) -> dict[str, str]:
    outside = f"/tmp/cqt-sandbox-probe-{unique}-{label}"
    command = "\n".join(
        [
            f"echo '[outside]'; (echo x > {outside} && echo written) 2>&1",
            f"echo '[inside]'; (echo x > {workspace}/in-{label}.txt && echo written) 2>&1",
            "echo '[network]'; (exec 3<>/dev/tcp/127.0.0.1/6379 && echo connected) 2>&1",
        ]
    )
    directive = json.dumps({"command": command, "description": "probe"})
    job = client.submit(prompt=f"[[sim: tool Bash {directive}]] probe {label}", tools="shell", cwd=str(workspace))
    record = client.wait(job.id, timeout=120, poll_s=0.2)
    assert record.status == "succeeded", record.error
    [result] = [e.data for e in client.events(job.id) if e.type == "tool_result"]
    made = Path(outside).exists()
    Path(outside).unlink(missing_ok=True)
    return {"text": str(result["text"]), "made outside": str(made), **_sections(str(result["text"]))}


def test_a_shell_command_never_runs_unsandboxed_with_the_sandbox_on(
    client: Client, workers: WorkerFactory, workspace: Path, unique: str, settings: Settings
) -> None:
    off = workers()
    plain = _probe(client, workspace, unique, "off")
    assert (plain["outside"], plain["inside"], plain["network"]) == ("written", "written", "connected"), plain
    off.stop()
    workers(policy=settings.policy.model_copy(update={"shell_sandbox": True}))
    boxed = _probe(client, workspace, unique, "on")
    assert boxed.get("outside") != "written" and boxed.get("network") != "connected", boxed
    assert boxed["made outside"] == "False", boxed
    if "Sandbox is required but failed to initialize" not in boxed["text"]:
        assert boxed.get("inside") == "written", boxed  # the sandbox ran it: the workspace is still writable
