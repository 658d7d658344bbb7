"""Runs that may execute commands or write files get a uid of their own: the uid pool, the refusals when the worker
cannot give one (not root, without the operator's consent to a shared uid) and when a token file is readable by
other users. Real processes, real uids (the suite runs as root), real files."""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import ConfigError
from claudeq.models import Event, JobSpec
from claudeq.worker.run import procs
from claudeq.worker.run.launcher import acquire_identity
from claudeq.worker.run.runner import Runner, RunRequest
from tests.support.procs import run_until

pytestmark = pytest.mark.integration

SHELL = ["Read", "Glob", "Grep", "Edit", "Write", "Bash"]


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cqt-identity-", dir="/tmp"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_runner(policy: WorkerPolicy, account: AccountConfig, run_root: Path) -> Runner:
    settings = Settings(_env_file=None, run_root=run_root, policy=policy)  # type: ignore[call-arg]
    settings.__dict__["accounts"] = AccountPool(accounts=[account])
    return Runner(settings)


def request(runner: Runner, **spec: object) -> RunRequest:
    [account] = runner.settings.accounts.accounts
    return RunRequest(job_id="identity-job", attempt=1, spec=JobSpec(prompt="hi", **spec), account=account)  # type: ignore[arg-type]


def test_identities_are_distinct_swept_and_bounded_by_the_range() -> None:
    policy = WorkerPolicy(run_uids=(63000, 63001), run_groups=[63500])
    one = acquire_identity(policy)
    two = acquire_identity(policy)
    try:
        assert {one.uid, two.uid} == {63000, 63001}
        assert one.gid == one.uid and one.groups == (63500,)
        with pytest.raises(ConfigError) as info:
            acquire_identity(policy)
        assert info.value.field == "CLAUDEQ_POLICY__RUN_UIDS"
        # Something left running under a run's uid (it cleared its environment, so the run-id sweep misses it).
        stray = subprocess.Popen(
            ["setpriv", f"--reuid={one.uid}", f"--regid={one.gid}", "--clear-groups", "--", "sleep", "300"],
            env={},
        )
        try:
            # Popen returns before setpriv has switched to the uid: wait until the process runs under it.
            run_until(lambda: stray.pid in procs.uid_pids(one.uid), 30, what="the stray process under the run's uid")
            one.release()
            assert procs.uid_pids(one.uid) == []
        finally:
            stray.kill()
            stray.wait()
        again = acquire_identity(policy)  # the released uid is free again
        assert again.uid == one.uid
        again.release()
    finally:
        one.release()
        two.release()


def test_run_groups_may_not_overlap_the_run_uids() -> None:
    with pytest.raises(ValueError, match="outside run_uids"):
        WorkerPolicy(run_uids=(63000, 63010), run_groups=[63005])


def _identity_as_non_root(runner: Runner, req: RunRequest) -> tuple[str, object]:
    """Ask for the run's identity in a forked child that gave up root (a real non-root worker)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setgroups([])
            os.setresgid(63999, 63999, 63999)
            os.setresuid(63999, 63999, 63999)
            try:
                answer: tuple[str, object] = ("identity", runner._identity_for(req))
            except ConfigError as exc:
                answer = ("error", (exc.field, exc.reason))
            os.write(write_end, pickle.dumps(answer))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    result: tuple[str, object] = pickle.loads(data)
    return result


def test_a_worker_that_cannot_switch_uid_refuses_shell_jobs_unless_the_policy_accepts_a_shared_uid(
    base: Path,
) -> None:
    account = AccountConfig(name="a", kind="oauth", token_env="CQT_IDENTITY_TOKEN")
    # With claudeq's sandbox off (with it, the worker's uid sees nothing of the worker: below).
    strict = make_runner(WorkerPolicy(allowed_tools=SHELL, sandbox="off"), account, base / "runs")
    kind, value = _identity_as_non_root(strict, request(strict, tools="shell"))
    assert kind == "error"
    field, reason = value  # type: ignore[misc]
    assert field == "CLAUDEQ_POLICY__SHARED_UID_OK"
    assert "Bash" in reason and "uid 63999" in reason and "CLAUDEQ_POLICY__SHARED_UID_OK=true" in reason
    assert _identity_as_non_root(strict, request(strict, tools="read-only")) == ("identity", None)

    accepting = make_runner(
        WorkerPolicy(allowed_tools=SHELL, shared_uid_ok=True, sandbox="off"), account, base / "runs"
    )
    assert _identity_as_non_root(accepting, request(accepting, tools="shell")) == ("identity", None)
    sandboxed = make_runner(WorkerPolicy(allowed_tools=SHELL), account, base / "runs")
    assert _identity_as_non_root(sandboxed, request(sandboxed, tools="shell")) == ("identity", None)


def test_a_token_file_other_users_can_read_refuses_shell_jobs(base: Path) -> None:
    token = base / "a.token"
    token.write_text("sk-ant-oat01-test-identity")
    token.chmod(0o644)  # in a directory anyone may enter: any uid can read it
    account = AccountConfig(name="a", kind="oauth", token_file=token, base_url="http://127.0.0.1:9")
    runner = make_runner(WorkerPolicy(allowed_tools=SHELL), account, base / "runs")

    async def emit(event: Event) -> None:
        return None

    with pytest.raises(ConfigError) as info:
        asyncio.run(runner.run(request(runner, tools="shell"), emit, asyncio.Event()))
    assert str(token) in info.value.reason and "chmod o-r" in info.value.reason
    token.chmod(0o600)
    identity = runner._identity_for(request(runner, tools="shell"))
    assert identity is not None
    identity.release()


def test_a_run_root_the_runs_cannot_enter_refuses_shell_jobs(base: Path, tmp_path: Path) -> None:
    account = AccountConfig(name="a", kind="oauth", token_env="CQT_IDENTITY_TOKEN")
    closed = tmp_path / "private"  # pytest's tmp_path lies under a 0700 directory
    runner = make_runner(WorkerPolicy(allowed_tools=SHELL), account, closed / "runs")
    closed.mkdir()
    with pytest.raises(ConfigError) as info:
        runner._identity_for(request(runner, tools="shell"))
    assert info.value.field == "CLAUDEQ_RUN_ROOT" and "chmod o+x" in info.value.reason
    with pytest.raises(ConfigError) as info:  # a root worker gives file-reading runs a uid of their own too
        runner._identity_for(request(runner, tools="read-only"))
    assert info.value.field == "CLAUDEQ_RUN_ROOT"
    assert runner._identity_for(request(runner)) is None  # a tool-less run keeps the worker's uid


def test_a_cwd_the_runs_own_uid_cannot_enter_is_a_configuration_error(base: Path, tmp_path: Path) -> None:
    """A root worker runs file-reading tools under a uid of their own: a job whose cwd that uid cannot reach fails
    with a configuration error naming the setting that fixes it, before any CLI starts."""
    account = AccountConfig(name="a", kind="oauth", token_env="CQT_IDENTITY_TOKEN")
    work = tmp_path / "work"  # pytest's tmp_path lies under a 0700 directory
    work.mkdir()
    runner = make_runner(WorkerPolicy(workspace_roots=[work]), account, base / "runs")
    with pytest.raises(ConfigError) as info:
        runner._identity_for(request(runner, tools="read-only", cwd=str(work)))
    assert info.value.field == "CLAUDEQ_POLICY__RUN_GROUPS" and str(work) in info.value.reason


def test_a_host_without_bubblewrap_refuses_runs_with_tools_unless_the_sandbox_is_off(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the sandbox cannot start, a run with tools fails with a configuration error naming the setting that
    would accept it without one; `claudeq config check`'s words say so too. Tool-less runs need no sandbox."""
    from claudeq.worker.run import sandbox

    token = base / "a.token"
    token.write_text("sk-ant-oat01-test-identity")
    token.chmod(0o600)
    account = AccountConfig(name="a", kind="oauth", token_file=token, base_url="http://127.0.0.1:9")
    empty = base / "no-tools-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no bwrap, no socat
    sandbox.forget()
    try:
        runner = make_runner(WorkerPolicy(allowed_tools=SHELL), account, base / "runs")

        async def emit(event: Event) -> None:
            return None

        for tools in ("read-only", "shell"):
            with pytest.raises(ConfigError) as info:
                asyncio.run(runner.run(request(runner, tools=tools), emit, asyncio.Event()))
            assert info.value.field == "CLAUDEQ_POLICY__SANDBOX", info.value
            assert "bubblewrap (bwrap) is not installed" in info.value.reason
            assert "CLAUDEQ_POLICY__SANDBOX=off" in info.value.reason
        words, problem = sandbox.isolation(runner.settings.policy)
        assert "unavailable" in words and problem is not None and "refused" in problem
        off, none = sandbox.isolation(runner.settings.policy.model_copy(update={"sandbox": "off"}))
        assert off.startswith("off (CLAUDEQ_POLICY__SANDBOX=off)") and none is None
    finally:
        sandbox.forget()
