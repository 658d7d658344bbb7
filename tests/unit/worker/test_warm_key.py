"""The warm-CLI key: equal only for runs whose every option (account, model, tools, prompts, env, …) is equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import JobSpec
from claudeq.worker.passthrough.server import PassThrough
from claudeq.worker.run.outcome import RunRequest
from claudeq.worker.run.runner import Runner
from claudeq.worker.run.tools import ToolRegistry
from claudeq.worker.run.warm import warm_eligible


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Runner:
    monkeypatch.setenv("CQT_KEY_A", "sk-ant-oat01-test-key-a")
    monkeypatch.setenv("CQT_KEY_B", "sk-ant-oat01-test-key-b")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        run_root=tmp_path / "runs",
        policy=WorkerPolicy(
            allowed_tools=["Read", "Glob", "Grep", "Bash", "Write"],
            workspace_roots=[tmp_path / "work"],
            mcp_tools_module="tests.support.sample_tools",
            fleet_tools=True,
            shared_uid_ok=True,
        ),
    )
    settings.__dict__["accounts"] = AccountPool(
        accounts=[
            AccountConfig(name="a", kind="oauth", token_env="CQT_KEY_A"),
            AccountConfig(name="b", kind="oauth", token_env="CQT_KEY_B"),
        ]
    )
    (tmp_path / "work").mkdir()
    return Runner(settings, passthrough=PassThrough())


def req(runner: Runner, account: str = "a", **spec: Any) -> RunRequest:
    acct = runner.settings.accounts.get(account)
    assert acct is not None
    return RunRequest(job_id="j1", attempt=1, spec=JobSpec(prompt=spec.pop("prompt", "p"), **spec), account=acct)


def test_the_key_ignores_the_prompt_and_the_job_but_not_any_option(runner: Runner) -> None:
    base = runner._warm_key(req(runner))
    assert runner._warm_key(req(runner, prompt="another prompt")) == base
    other = runner._warm_key(RunRequest(job_id="j2", attempt=3, spec=JobSpec(prompt="x"), account=req(runner).account))
    assert other == base
    variants: list[dict[str, Any]] = [
        {"model": "haiku"},
        {"fallback_model": "haiku"},
        {"system_prompt": "terse"},
        {"append_system_prompt": "terse"},
        {"max_turns": 2},
        {"max_budget_usd": 0.5},
        {"effort": "low"},
        {"thinking": "disabled"},
        {"tools": "read-only"},
        {"mcp_tools": ["add"]},
        {"output_schema": {"type": "object"}},
        {"permission_mode": "dontAsk"},
    ]
    keys = {runner._warm_key(req(runner, **v)) for v in variants}
    assert base not in keys and len(keys) == len(variants)
    assert runner._warm_key(req(runner, account="b")) != base
    assert runner._warm_key(req(runner, tenant="team-b")) != base  # a warm CLI never serves two tenants
    # The same MCP tools give the same key (the server instance is made per run).
    assert runner._warm_key(req(runner, mcp_tools=["add"])) == runner._warm_key(req(runner, mcp_tools=["add"]))


def test_the_key_covers_the_environment(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    base = runner._warm_key(req(runner))
    runner.settings = runner.settings.model_copy(update={"cli_max_retries": 3})
    assert runner._warm_key(req(runner)) != base


OWN_UID = "runs under a uid of its own (shell, file tools)"


def test_who_runs_cold(runner: Runner, tmp_path: Path) -> None:
    tools = ToolRegistry.from_settings(runner.settings)
    settings = runner.settings
    assert warm_eligible(req(runner), settings, tools) is None
    read_only = req(runner, tools="read-only", cwd=str(tmp_path / "work"))
    # A root worker runs file-reading tools under a uid of their own (the kernel holds them to the workspace): in a
    # sandbox, a warm CLI holds that uid for its life; with the sandbox off, cold. A worker that is not root runs them
    # under its own uid, in a sandbox kept with a warm CLI, or with the sandbox off held by the hook alone.
    unboxed = settings.model_copy(update={"policy": settings.policy.model_copy(update={"sandbox": "off"})})
    with patch("claudeq.worker.run.workdirs.can_switch_uid", return_value=True):
        assert warm_eligible(read_only, settings, tools) is None
        assert warm_eligible(read_only, unboxed, tools) == OWN_UID
        assert warm_eligible(req(runner, tools=["Read", "Write"]), settings, tools) == OWN_UID
    with patch("claudeq.worker.run.workdirs.can_switch_uid", return_value=False):
        assert warm_eligible(read_only, settings, tools) is None
        assert warm_eligible(read_only, unboxed, tools) is None
    assert warm_eligible(req(runner, conversation="c"), settings, tools) == "a conversation turn"
    resumed = req(runner)
    resumed.resume = "0e0b1e37-0000-4000-8000-000000000000"
    assert warm_eligible(resumed, settings, tools) == "resumes a session"
    assert warm_eligible(req(runner, tools=["Bash"]), settings, tools) == OWN_UID
    assert warm_eligible(req(runner, tools=["Write"]), settings, tools) == OWN_UID
    assert warm_eligible(req(runner, mcp_tools=["submit_job"]), settings, tools) == "fleet tools are bound to the job"
    assert warm_eligible(req(runner, mcp_tools=["add"]), settings, tools) is None
    off = settings.model_copy(update={"warm_clients": 0})
    assert warm_eligible(req(runner), off, tools) == "warm CLIs are off"
    # File tools that could reach the CLIs' config dirs (the run root under a workspace root) run cold.
    exposed = unboxed.model_copy(update={"run_root": tmp_path / "work" / "runs"})
    with patch("claudeq.worker.run.workdirs.can_switch_uid", return_value=False):
        assert warm_eligible(read_only, exposed, tools) is not None
    assert warm_eligible(req(runner), exposed, tools) is None


def test_the_budget_defaults_to_the_concurrency() -> None:
    assert Settings(_env_file=None, concurrency=3).warm_budget == 3  # type: ignore[call-arg]
    assert Settings(_env_file=None, concurrency=3, warm_clients=0).warm_budget == 0  # type: ignore[call-arg]
    assert Settings(_env_file=None, concurrency=3, warm_clients=8).warm_budget == 8  # type: ignore[call-arg]


def test_a_traced_run_starts_a_cli_of_its_own_unless_the_clis_spans_are_off(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from claudeq import tracing

    tools = ToolRegistry.from_settings(runner.settings)
    traced = replace(req(runner), traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    monkeypatch.setenv("CLAUDEQ_OTEL_ENABLED", "true")
    tracing.enabled.cache_clear()
    try:
        # The CLI reads TRACEPARENT once, at start (docs/cli-behaviour.md#telemetry): a warm CLI has another job's.
        assert "traced" in (warm_eligible(traced, runner.settings, tools) or "")
        monkeypatch.setenv("CLAUDEQ_OTEL_CLI", "false")
        assert warm_eligible(traced, runner.settings, tools) is None
        assert warm_eligible(req(runner), runner.settings, tools) is None
    finally:
        monkeypatch.undo()
        tracing.enabled.cache_clear()


def test_a_sandboxed_runs_key_holds_what_its_sandbox_shows(runner: Runner, tmp_path: Path) -> None:
    """A sandbox keeps what its paths led to when it started: a cwd or add_dir led elsewhere (a symlink pointed at
    another folder, a folder replaced at the same path) gives another key, so a warm CLI never serves a job whose
    sandbox would show other files."""
    work = tmp_path / "work"
    (work / "a").mkdir()
    (work / "b").mkdir()
    link = work / "current"
    link.symlink_to(work / "a")

    def key(**spec: Any) -> str:
        with patch("claudeq.worker.run.workdirs.can_switch_uid", return_value=False):
            return runner._warm_key(req(runner, tools="read-only", **spec))

    through_link = key(cwd=str(link))
    assert key(cwd=str(link)) == through_link
    assert key(cwd=str(work / "a")) != through_link  # another path: another cwd for the CLI
    assert key(cwd=str(link), add_dirs=[str(work / "b")]) != through_link
    link.unlink()
    link.symlink_to(work / "b")
    assert key(cwd=str(link)) != through_link
    in_b = key(cwd=str(work / "b"))
    (work / "b").rename(work / "b-old")
    (work / "b").mkdir()
    assert key(cwd=str(work / "b")) != in_b
    # With the sandbox off the view is not part of the key (the CLI sees the host: the path is what counts).
    runner.settings = runner.settings.model_copy(
        update={"policy": runner.settings.policy.model_copy(update={"sandbox": "off"})}
    )
    unboxed = key(cwd=str(work / "b"))
    (work / "b").rename(work / "b-older")
    (work / "b").mkdir()
    assert key(cwd=str(work / "b")) == unboxed
