"""Tool approval (docs/jobs.md#tool-approval): a job whose agent calls `Bash` with `approve_tools` waits for a
person's decision before the command runs.

Real worker processes, the real CLI, the simulator scripting the `Bash` call. The command appends a line to a
marker file, so the test counts how many times it really ran; the simulator's request log shows what the model was
told.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import ApprovalRefused
from claudeq.keys import Keys
from claudeq.models import JobRecord
from claudeq.producer.client import AsyncClient, Client
from claudeq.worker.metrics.exporter import ClusterCollector
from tests.e2e.conftest import WorkerFactory
from tests.integration.test_cli_exit_codes import cli
from tests.integration.test_mcp_http import TOKENS, _mcp_http, as_caller
from tests.support.procs import count_claude, run_until
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import settings_env, worker_env

pytestmark = pytest.mark.e2e


WORKSPACE_GID = 62508  # the runs' shared group (outside the default run uid range 61000-61999)


@pytest.fixture
def workspace() -> Iterator[Path]:
    """The jobs' cwd: every run with tools sees only its workspace (docs/architecture.md#the-run-sandbox), so the
    marker the commands write lives there."""
    with open_base("cqt-approval-") as base:
        yield group_workspace(base / "work", WORKSPACE_GID)


@pytest.fixture
def settings(settings: Settings, workspace: Path) -> Settings:
    policy = WorkerPolicy(allowed_tools=["Bash"], workspace_roots=[workspace], run_groups=[WORKSPACE_GID])
    return settings.model_copy(update={"policy": policy})


@pytest.fixture
def marker(workspace: Path) -> Path:
    return workspace / "marker"


def bash_prompt(marker: Path, word: str) -> str:
    """A prompt the simulator answers with one `Bash` call that appends `word` to `marker`."""
    command = json.dumps({"command": f"echo {word} >> {marker}", "description": "mark"})
    return f"[[sim: tool Bash {command}]] approval {word}"


def waiting(client: Client, job_id: str, timeout_s: float = 90) -> JobRecord:
    """The record once the job shows `waiting_approval`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = client.get(job_id)
        if record.shown_status == "waiting_approval" or record.finished:
            break
        time.sleep(0.1)
    assert record.shown_status == "waiting_approval", record.public()
    return record


def ran(marker: Path) -> list[str]:
    """The lines the command wrote: one per time it really ran."""
    return marker.read_text().split() if marker.exists() else []


def events(client: Client, job_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in client.events(job_id) if e.type == kind]


def test_approved_within_the_hold_the_command_runs_once_on_the_same_cli(
    client: Client, workers: WorkerFactory, marker: Path, unique: str
) -> None:
    workers()
    job = client.submit(
        prompt=bash_prompt(marker, "yes"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    record = waiting(client, job.id)
    assert record.public()["status"] == "waiting_approval"
    assert record.approval is not None and record.approval.tool == "Bash"
    assert "echo yes" in record.approval.input["command"]
    assert [r.id for r in client.approvals()] == [job.id]
    assert ran(marker) == []  # nothing runs before the decision

    answered = client.approve(job.id, reason="looks fine")
    assert answered.decision is not None and answered.decision.by == "operator"
    done = client.wait(job.id, timeout=90)

    assert done.status == "succeeded", done.error
    assert ran(marker) == ["yes"]
    assert len(done.attempts) == 1
    assert len(events(client, job.id, "run_started")) == 1  # the same CLI went on
    [asked] = events(client, job.id, "approval_requested")
    assert asked["request_id"] == answered.request_id and asked["tool"] == "Bash"
    [decided] = events(client, job.id, "approval_decided")
    assert decided["approve"] is True and decided["by"] == "operator" and decided["reason"] == "looks fine"
    # A second answer to the same request is refused, saying who answered first.
    with pytest.raises(ApprovalRefused) as refused:
        client.approve(job.id, approve=False)
    assert refused.value.why == "decided" and refused.value.decided_by == "operator"


def test_denied_the_tool_never_runs_and_the_model_is_told_why(
    client: Client, workers: WorkerFactory, marker: Path, simulator: Any, settings: Settings
) -> None:
    workers()
    job = client.submit(
        prompt=bash_prompt(marker, "no"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    waiting(client, job.id)
    shown = cli(settings, "status", job.id)
    assert shown.returncode == 0 and "waiting_approval" in shown.stdout and "Bash" in shown.stdout, shown
    listed = cli(settings, "approvals", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)["approvals"]] == [job.id], listed
    denied = cli(settings, "approve", job.id, "--deny", "--reason", "not on a Friday")
    assert denied.returncode == 0 and "denied" in denied.stdout, denied
    again = cli(settings, "approve", job.id)
    said = " ".join((again.stderr + again.stdout).split())  # the console wraps long lines
    assert again.returncode != 0 and "already answered (denied by operator" in said, again
    done = client.wait(job.id, timeout=90)

    assert done.status == "succeeded", done.error  # the agent went on: here it answers the tool result
    assert ran(marker) == []
    follow_up = [r for r in simulator.requests() if "approval no" in json.dumps(r["messages"])][-1]
    told = follow_up["messages"][-1]["text"] if follow_up["messages"][-1]["role"] == "user" else ""
    told = told or json.dumps(follow_up["messages"])
    assert "A person denied this use of Bash" in told and "not on a Friday" in told
    assert "not on a Friday" in (done.result.text if done.result else "")


def test_only_a_matching_input_rule_waits(client: Client, workers: WorkerFactory, marker: Path) -> None:
    workers()
    job = client.submit(
        prompt=bash_prompt(marker, "free"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=[{"tool": "Bash", "match": "git push*"}],
    )
    done = client.wait(job.id, timeout=90)
    assert done.status == "succeeded", done.error
    assert ran(marker) == ["free"]
    assert events(client, job.id, "approval_requested") == []


def test_a_timeout_denies_or_fails_as_the_job_says(
    client: Client, workers: WorkerFactory, marker: Path, unique: str
) -> None:
    workers()
    denied = client.submit(
        prompt=bash_prompt(marker, "late"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=["Bash"],
        approval_timeout_s=1,
    )
    failed = client.submit(
        prompt=bash_prompt(marker, "later"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=["Bash"],
        approval_timeout_s=1,
        on_approval_timeout="fail",
    )
    first = client.wait(denied.id, timeout=90)
    second = client.wait(failed.id, timeout=90)

    assert first.status == "succeeded", first.error
    assert "Nobody approved this use of Bash" in (first.result.text if first.result else "")
    [decided] = events(client, denied.id, "approval_decided")
    assert decided["by"] == "timeout" and decided["approve"] is False
    assert second.status == "failed"
    assert second.error is not None and "Nobody approved this use of Bash" in second.error.message
    assert ran(marker) == []


def test_another_tenants_token_cannot_decide_and_a_cancel_ends_the_wait(
    client: Client, workers: WorkerFactory, marker: Path
) -> None:
    workers()
    job = client.submit(
        prompt=bash_prompt(marker, "mine"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    waiting(client, job.id)
    with pytest.raises(ApprovalRefused) as refused:
        client.approve(job.id, tenant="someone-else")
    assert refused.value.why == "tenant"
    assert client.get(job.id).shown_status == "waiting_approval"

    started = time.monotonic()
    client.cancel(job.id)
    done = client.wait(job.id, timeout=30)
    assert done.status == "cancelled"
    assert time.monotonic() - started < 10
    assert ran(marker) == []


class TestOverMcp:
    """`claudeq mcp --http` with two tenants mapped by bearer tokens: `list_approvals` shows a tenant its own
    waiting jobs, and `decide_approval` answers only for the job's own tenant. Team a's jobs wait for approval of
    their `Bash` calls by its tenant's default."""

    @pytest.fixture
    def settings(self, settings: Settings, tmp_path: Path) -> Settings:
        tenants = tmp_path / "tenants.toml"
        tenants.write_text(
            '[[tenants]]\nname = "team-a"\nmcp_token_env = "CQT_MCP_TOKEN_A"\napprove_tools = ["Bash"]\n\n'
            '[[tenants]]\nname = "team-b"\nmcp_token_env = "CQT_MCP_TOKEN_B"\n'
        )
        return settings.model_copy(update={"tenants_file": tenants})

    @pytest.fixture
    def mcp_url(self, settings: Settings, tmp_path: Path) -> Iterator[str]:
        env = {**worker_env(settings, []), **settings_env(settings), **TOKENS}
        with _mcp_http(env, tmp_path / "mcp-http.log") as url:
            yield url

    async def test_another_tenants_token_cannot_decide(
        self, client: Client, workers: WorkerFactory, marker: Path, mcp_url: str
    ) -> None:
        workers()
        # No approve_tools of its own: its tenant's default applies.
        job = client.submit(prompt=bash_prompt(marker, "a"), tools=["Bash"], cwd=str(marker.parent), tenant="team-a")
        await asyncio.to_thread(waiting, client, job.id)
        async with as_caller(mcp_url, TOKENS["CQT_MCP_TOKEN_B"]) as team_b:
            listed = await team_b.call_tool("list_approvals", {})
            assert listed.structured_content == {"approvals": []}
            refused = await team_b.call_tool("decide_approval", {"job_id": job.id, "approve": True})
            assert refused.is_error and "another tenant" in refused.content[0].text  # type: ignore[union-attr]
        assert client.get(job.id).shown_status == "waiting_approval"
        async with as_caller(mcp_url, TOKENS["CQT_MCP_TOKEN_A"]) as team_a:
            listed = await team_a.call_tool("list_approvals", {})
            assert listed.structured_content is not None
            assert [r["id"] for r in listed.structured_content["approvals"]] == [job.id]
            decided = await team_a.call_tool("decide_approval", {"job_id": job.id, "approve": True, "reason": "ok"})
            assert not decided.is_error and decided.structured_content is not None
            assert decided.structured_content["approval"]["decision"]["by"] == "tenant:team-a"
            again = await team_a.call_tool("decide_approval", {"job_id": job.id, "approve": False})
            assert again.is_error and "already answered" in again.content[0].text  # type: ignore[union-attr]
        done = await asyncio.to_thread(client.wait, job.id, 90)
        assert done.status == "succeeded", done.error
        assert ran(marker) == ["a"]


def test_past_the_hold_the_job_waits_holding_nothing_and_resumes_on_another_worker(
    client: Client,
    workers: WorkerFactory,
    marker: Path,
    settings: Settings,
    redis_client: redis.Redis,
    simulator: Any,
) -> None:
    first = workers(approval_hold_s=1)
    job = client.submit(
        prompt=bash_prompt(marker, "later"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    parked = run_until(
        lambda: (r := client.get(job.id)).status == "deferred" and r.shown_status == "waiting_approval" and r,
        timeout=90,
        what="the job parked",
    )
    assert parked and parked.public()["status"] == "waiting_approval"
    assert parked.approval is not None and parked.approval.parked
    # Nothing is held while it waits: no CLI of the job, no account slot, and its worker may die.
    assert count_claude([job.id]) == 0
    keys = Keys(settings.key_prefix)
    assert [redis_client.zcard(keys.account_slots(a)) for a in ("a", "b")] == [0, 0]
    registry = CollectorRegistry()
    registry.register(ClusterCollector(settings, redis_client))
    assert registry.get_sample_value("claudeq_jobs_waiting_approval", {"tenant": "default"}) == 1
    first.kill()
    assert [r.id for r in client.approvals()] == [job.id]
    second = workers()

    client.approve(job.id, reason="go ahead")
    done = client.wait(job.id, timeout=120)

    assert done.status == "succeeded", done.error
    assert ran(marker) == ["later"]  # run once, by the resumed session
    assert [a.outcome for a in done.attempts] == ["requeued", "success"]
    assert done.attempts[-1].worker == second.worker_id != done.attempts[0].worker
    assert done.attempts[0].session_id == done.attempts[-1].session_id  # the same session, resumed
    [decided] = events(client, job.id, "approval_decided")
    assert decided["by"] == "operator" and decided["reason"] == "go ahead"
    assert "Tool said:" in (done.result.text if done.result else "")
    assert registry.get_sample_value("claudeq_jobs_waiting_approval", {"tenant": "default"}) is None


def test_past_the_hold_a_denial_reaches_the_resumed_session(
    client: Client, workers: WorkerFactory, marker: Path, simulator: Any
) -> None:
    workers(approval_hold_s=1)
    job = client.submit(
        prompt=bash_prompt(marker, "never"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    run_until(lambda: client.get(job.id).status == "deferred", timeout=90, what="the job parked")
    client.approve(job.id, approve=False, reason="too risky")
    done = client.wait(job.id, timeout=120)

    assert done.status == "succeeded", done.error
    assert ran(marker) == []
    last = simulator.requests()[-1]
    told = json.dumps(last["messages"])
    assert "A person denied this use of Bash" in told and "too risky" in told


def test_past_the_hold_a_timeout_denies(client: Client, workers: WorkerFactory, marker: Path) -> None:
    workers(approval_hold_s=1)
    job = client.submit(
        prompt=bash_prompt(marker, "expired"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=["Bash"],
        approval_timeout_s=4,
    )
    done = client.wait(job.id, timeout=120)
    assert done.status == "succeeded", done.error
    assert ran(marker) == []
    [decided] = events(client, job.id, "approval_decided")
    assert decided["by"] == "timeout" and decided["approve"] is False


def test_a_worker_killed_while_its_run_holds_the_cli_loses_nothing(
    client: Client, workers: WorkerFactory, marker: Path
) -> None:
    first = workers()
    job = client.submit(
        prompt=bash_prompt(marker, "kept"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    asked = waiting(client, job.id).approval
    assert asked is not None
    first.kill()
    second = workers()
    # The dead run's request is stale: it cannot be answered, and the job runs again and asks again.
    again = run_until(
        lambda: (r := client.get(job.id)).waiting_approval and r.approval and r.approval.request_id != asked.request_id,
        timeout=120,
        what="the job asking again on the new worker",
    )
    assert again
    with pytest.raises(ApprovalRefused) as refused:
        client.approve(job.id, request_id=asked.request_id)
    assert refused.value.why == "other"
    client.approve(job.id)
    done = client.wait(job.id, timeout=120)
    assert done.status == "succeeded", done.error
    assert done.attempts[-1].worker == second.worker_id
    assert ran(marker) == ["kept"]


def test_a_cancel_ends_a_parked_job_at_once(client: Client, workers: WorkerFactory, marker: Path) -> None:
    workers(approval_hold_s=1)
    job = client.submit(
        prompt=bash_prompt(marker, "gone"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    run_until(lambda: client.get(job.id).status == "deferred", timeout=90, what="the job parked")
    listed = asyncio.run(AsyncClient(client=client).approvals())
    assert [r.id for r in listed] == [job.id] and listed[0].shown_status == "waiting_approval"
    assert client.cancel(job.id) == "cancelled"
    assert client.get(job.id).status == "cancelled"
    with pytest.raises(ApprovalRefused) as refused:
        asyncio.run(AsyncClient(client=client).approve(job.id))
    assert refused.value.why == "stale"
    assert ran(marker) == []


def test_a_shutdown_during_the_hold_parks_the_request(client: Client, workers: WorkerFactory, marker: Path) -> None:
    first = workers()
    job = client.submit(
        prompt=bash_prompt(marker, "drained"), tools=["Bash"], cwd=str(marker.parent), approve_tools=["Bash"]
    )
    asked = waiting(client, job.id).approval
    assert asked is not None
    assert first.stop() == 0  # SIGTERM: the grace passes, the run is stopped
    parked = client.get(job.id)
    assert parked.status == "deferred" and parked.shown_status == "waiting_approval"
    assert parked.approval is not None and parked.approval.request_id == asked.request_id and parked.approval.parked
    second = workers()
    client.approve(job.id, request_id=asked.request_id)
    done = client.wait(job.id, timeout=120)
    assert done.status == "succeeded", done.error
    assert done.attempts[-1].worker == second.worker_id
    assert ran(marker) == ["drained"]
