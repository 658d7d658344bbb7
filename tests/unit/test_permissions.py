"""The permission policy (claudeq/permissions.py): what a spec may ask for, as the producer and the worker check it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import PolicyViolation
from claudeq.models import JobSpec
from claudeq.permissions import allowed_builtin_tools, check_spec, spec_problems


class Registry:
    """A worker's MCP tool registry holding `names`."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def unknown(self, names: list[str]) -> list[str]:
        return [n for n in names if n not in self.names]

    def mixes_fleet(self, names: list[str]) -> bool:
        return False


def settings_with(**policy: Any) -> Settings:
    return Settings(_env_file=None, policy=WorkerPolicy(**policy))  # type: ignore[call-arg]


def test_a_spec_within_the_policy_has_no_problems() -> None:
    assert spec_problems(JobSpec(prompt="x"), settings_with()) == []


def test_every_problem_is_named_with_its_field(tmp_path: Path) -> None:
    spec = JobSpec(prompt="x", tools=["Bash"], cwd="/etc", permission_mode="bypassPermissions")
    fields = [field for field, _ in spec_problems(spec, settings_with(workspace_roots=[tmp_path]))]
    assert fields == ["tools", "cwd", "permission_mode"]


def test_the_builtin_tools_a_job_gets_are_checked_against_the_policy() -> None:
    policy = settings_with().policy
    assert allowed_builtin_tools(JobSpec(prompt="x", tools=["Read"]), policy) == ["Read"]
    with pytest.raises(PolicyViolation) as err:
        allowed_builtin_tools(JobSpec(prompt="x", tools=["Bash"]), policy)
    assert err.value.field == "tools"


def test_the_worker_refuses_unregistered_mcp_tools_and_missing_directories(tmp_path: Path) -> None:
    policy = settings_with(workspace_roots=[tmp_path]).policy
    check_spec(JobSpec(prompt="x", mcp_tools=["add"], cwd=str(tmp_path)), policy, Registry("add"))
    with pytest.raises(PolicyViolation) as err:
        check_spec(JobSpec(prompt="x", mcp_tools=["rm_rf"]), policy, Registry("add"))
    assert err.value.field == "mcp_tools"
    with pytest.raises(PolicyViolation) as err:
        check_spec(JobSpec(prompt="x", cwd=str(tmp_path / "missing")), policy, None)
    assert err.value.field == "cwd"
