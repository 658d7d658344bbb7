"""A shell job cannot read the worker's or another run's secrets.

Real worker (as root), the real CLI and the simulator: a job with the `shell` profile runs a Bash command (a simulator
tool directive) that base64-encodes what it can read of the worker's environment, of another running job's CLI
environment and of an account's token file, and tries the other run's directory. Its output lands in the job's
`tool_result` event; decoded, it must hold no secret. The run itself works: it writes into the workspace."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.producer.client import Client
from claudeq.worker.run import procs
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.integration.test_prometheus import free_port
from tests.support.procs import run_until
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e  # the worker runs as root (as this suite does) to give runs a uid of their own

WORKSPACE_GID = 62500  # the runs' shared group (outside the default run uid range 61000-61999)
WORKER_SECRET = "cqt-worker-only-secret-8d1f3a"


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("a", max_concurrency=2), SimAccount("b", max_concurrency=2), SimAccount("f", max_concurrency=2)]


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory any uid may enter (pytest's tmp_path is under a 0700 directory): run root, workspace, secrets."""
    with open_base("cqt-isolation-") as path:
        yield path


@pytest.fixture
def token_file(base: Path, accounts: list[SimAccount]) -> Path:
    secrets = base / "secrets"
    secrets.mkdir(mode=0o755)  # enterable by anyone: only the file's own mode protects it
    path = secrets / "f.token"
    path.write_text(accounts[2].token_value)
    path.chmod(0o600)
    return path


@pytest.fixture
def accounts_file(base: Path, accounts: list[SimAccount], simulator: Any, token_file: Path) -> Path:
    lines = []
    for account in accounts:
        source = f'token_file = "{token_file}"' if account.name == "f" else f'token_env = "{account.token_env}"'
        lines += [
            "[[accounts]]",
            f'name = "{account.name}"',
            'kind = "oauth"',
            source,
            f"max_concurrency = {account.max_concurrency}",
            f'base_url = "{simulator.base_url}"',
            "",
        ]
    path = base / "accounts.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.fixture
def workspace(base: Path) -> Path:
    return group_workspace(base / "work", WORKSPACE_GID)


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, base: Path, workspace: Path) -> Settings:
    policy = WorkerPolicy(
        allowed_tools=["Read", "Glob", "Grep", "Edit", "Write", "Bash"],
        workspace_roots=[workspace],
        run_groups=[WORKSPACE_GID],
    )
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        run_root=base / "runs",
        policy=policy,
        secret_env=["CQT_WORKER_SECRET"],
        **{**FAST_E2E, "concurrency": 3},
    )


def _cli_pid(job_id: str) -> int | None:
    """The pid of the job's CLI itself (not its wrapper, sandbox or forwarder, which carry its job id too)."""
    for pid in procs.job_pids(job_id):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"/claude"):
                return pid
        except OSError:
            continue
    return None


def _sections(text: str) -> dict[str, str]:
    """`[name] ...` blocks of the command's output."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"\[(\w+)\]\n?(.*?)(?=\n\[\w+\]|\Z)", text, re.S)}


def _decoded(text: str) -> str:
    """`text` with every base64-looking run decoded too (redaction only ever matched the literal token)."""
    out = [text]
    for chunk in re.findall(r"[A-Za-z0-9+/=]{16,}", text):
        try:
            out.append(base64.b64decode(chunk + "=" * (-len(chunk) % 4)).decode(errors="replace"))
        except (binascii.Error, ValueError):
            continue
    return "\n".join(out)


def test_a_shell_job_reads_no_secret_of_the_worker_or_other_runs(
    client: Client,
    workers: WorkerFactory,
    settings: Settings,
    accounts: list[SimAccount],
    token_file: Path,
    workspace: Path,
) -> None:
    worker = workers(extra_env={"CQT_WORKER_SECRET": WORKER_SECRET})
    victim = client.submit(
        prompt="[[sim: stall 60]] a long shell job on the token-file account", tools="shell", account="f"
    )
    victim_pid = run_until(lambda: _cli_pid(victim.id), 30, 0.1, what="the victim's CLI")
    [victim_dir] = (settings.run_root or Path("/")).glob(f"claudeq-run-{victim.id[:40]}-*")

    command = "\n".join(
        [
            f"echo '[worker]'; (tr '\\0' '\\n' < /proc/{worker.pid}/environ | base64 -w0) 2>&1; echo",
            f"echo '[victim]'; (tr '\\0' '\\n' < /proc/{victim_pid}/environ | grep -E 'TOKEN|KEY' | base64 -w0) 2>&1",
            f"echo; echo '[tokenfile]'; base64 -w0 {token_file} 2>&1; echo",
            f"echo '[victimdir]'; ls {victim_dir} 2>&1 | head -3",
            "echo '[uid]'; id -u",
            f"echo '[workspace]'; echo made-by-the-run > {workspace}/out.txt && echo written",
        ]
    )
    directive = json.dumps({"command": command, "description": "look around"})
    attacker = client.submit(
        prompt=f"[[sim: tool Bash {directive}]] look around", tools="shell", account="a", cwd=str(workspace)
    )
    record = client.wait(attacker.id, timeout=120, poll_s=0.1)
    assert record.status == "succeeded", record.error
    [result] = [e.data for e in client.events(attacker.id) if e.type == "tool_result"]
    text = result["text"]
    found = _sections(text)
    assert set(found) >= {"worker", "victim", "tokenfile", "victimdir", "uid", "workspace"}, text

    decoded = _decoded(text)
    secrets = {"token of b (worker env)": accounts[1].token_value, "token of f": accounts[2].token_value}
    secrets["worker-only secret"] = WORKER_SECRET
    for what, value in secrets.items():
        assert value not in decoded, f"the shell job read the {what}:\n{text}"
    for name in ("worker", "victim", "tokenfile", "victimdir"):
        # Denied by the run uid, or not there at all: its sandbox has no other process and no such file.
        assert "Permission denied" in found[name] or "No such file or directory" in found[name], (name, text)
    uid = int(found["uid"])
    first, last = settings.policy.run_uids
    assert first <= uid <= last
    assert found["workspace"] == "written"
    made = workspace / "out.txt"
    assert made.read_text() == "made-by-the-run\n" and made.stat().st_uid == uid
    assert made.stat().st_gid == WORKSPACE_GID  # the workspace's group, so the next run's uid can use it too

    client.cancel(victim.id)
    assert client.wait(victim.id, timeout=60, poll_s=0.1).status == "cancelled"
    assert procs.uid_pids(uid) == []  # nothing left running under the run's uid


def test_a_shell_conversation_resumes_under_the_runs_own_uid(
    client: Client, workers: WorkerFactory, workspace: Path
) -> None:
    """The second turn resumes the session, which the SDK materializes into a config dir of its own (the worker's):
    the run's uid must get it too."""
    workers()
    turns = []
    for i in range(2):
        command = json.dumps({"command": f"id -u > {workspace}/turn{i}.txt", "description": "who"})
        job = client.submit(
            prompt=f"[[sim: tool Bash {command}]] turn {i}", tools="shell", conversation="chat", cwd=str(workspace)
        )
        record = client.wait(job.id, timeout=120, poll_s=0.1)
        assert record.status == "succeeded", record.error
        turns.append(record)
    assert turns[1].session_id is not None
    assert all(int((workspace / f"turn{i}.txt").read_text()) != 0 for i in range(2))


#: What a shell job sends with its own CLI's stand-in (read from the CLI's environment, same run uid): calls the CLI
#: never makes. Each `[name]` section prints the HTTP status the pass-through answered.
MINT = r"""
p=$$; tok=; url=
while [ "$p" -gt 1 ]; do
  env=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null)
  t=$(printf '%s\n' "$env" | sed -n 's/^CLAUDE_CODE_OAUTH_TOKEN=//p' | head -1)
  u=$(printf '%s\n' "$env" | sed -n 's/^ANTHROPIC_BASE_URL=//p' | head -1)
  if [ -n "$t" ] && [ -n "$u" ]; then tok=$t; url=$u; break; fi
  p=$(awk '{print $4}' /proc/$p/stat)
done
echo "[found]"; [ -n "$tok" ] && echo "stand-in of pid $p"
for name in mint:/api/oauth/claude_cli/create_api_key batches:/v1/messages/batches; do
  echo "[${name%%:*}]"
  curl -s --noproxy '*' -o /dev/null -w '%{http_code}' -X POST -H "authorization: Bearer $tok" \
    -H 'content-type: application/json' -d '{"name": "minted"}' "$url${name#*:}"
  echo
done
"""


def test_a_shell_job_cannot_use_its_clis_stand_in_for_calls_the_cli_never_makes(
    client: Client, workers: WorkerFactory, simulator: Any, workspace: Path
) -> None:
    """The issue's attack: a shell job reads its own CLI's stand-in and asks the pass-through to mint an API key and
    to start a message batch. Both are refused there (403) and never reach the upstream (the simulator) with the real
    token; the refusals are counted on the worker's /metrics. The run's own model calls still go through."""
    port = free_port()
    workers(metrics_port=port)
    directive = json.dumps({"command": MINT, "description": "mint"})
    job = client.submit(prompt=f"[[sim: tool Bash {directive}]] mint", tools="shell", account="a", cwd=str(workspace))
    record = client.wait(job.id, timeout=120, poll_s=0.1)
    assert record.status == "succeeded", record.error
    [result] = [e.data for e in client.events(job.id) if e.type == "tool_result"]
    found = _sections(result["text"])
    assert found["found"].startswith("stand-in of pid"), result["text"]  # the job did hold a live stand-in
    assert found["mint"] == "403" and found["batches"] == "403", result["text"]
    received = [(e["method"], e["path"], e["query"], e["account"]) for e in simulator.wire()]
    assert received and set(received) == {("POST", "/v1/messages", "beta=true", "a")}, received
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'claudeq_passthrough_refused_total{method="POST",reason="path"} 2.0' in scraped
