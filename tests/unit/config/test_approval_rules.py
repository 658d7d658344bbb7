"""Which tool uses wait for approval (config/approval_rules.py), and how a spec and a tenant give the rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from claudeq.config.approval_rules import ApprovalRule, needs_approval, rule_of, subject, tool_named
from claudeq.config.settings import Settings
from claudeq.config.tenants import TenantConfig
from claudeq.errors import JobSpecError
from claudeq.models import JobSpec
from claudeq.producer.validation import validate_spec


def rules(*items: str | dict[str, str]) -> list[ApprovalRule]:
    return [rule_of(i if isinstance(i, str) else ApprovalRule(**i)) for i in items]


def test_a_tool_name_or_glob_makes_every_call_of_it_wait() -> None:
    given = rules("Bash", "mcp__claudeq__*")
    assert needs_approval(given, "Bash", {"command": "ls"}) is not None
    assert needs_approval(given, "mcp__claudeq__submit_job", {}) is not None
    assert needs_approval(given, "Read", {"file_path": "/x"}) is None
    assert tool_named(given, "mcp__claudeq__wait_job") and not tool_named(given, "Write")


def test_an_input_rule_matches_what_the_call_does() -> None:
    given = rules({"tool": "Bash", "match": "git push*"}, {"tool": "Write", "match": "/etc/*"})
    assert needs_approval(given, "Bash", {"command": "git push origin main"}) is not None
    assert needs_approval(given, "Bash", {"command": "git status"}) is None
    assert needs_approval(given, "Write", {"file_path": "/etc/hosts", "content": "x"}) is not None
    assert needs_approval(given, "Write", {"file_path": "/srv/a", "content": "/etc/x"}) is None
    # The CLI still asks for every Bash call (the gate allows the others at once).
    assert tool_named(given, "Bash")


def test_a_tool_without_a_subject_field_is_matched_on_its_input_json() -> None:
    assert subject("mcp__mail__send", {"to": "a@b", "body": "hi"}) == '{"body":"hi","to":"a@b"}'
    given = rules({"tool": "mcp__mail__*", "match": '*"to":"*@example.com"*'})
    assert needs_approval(given, "mcp__mail__send", {"to": "x@example.com"}) is not None
    assert needs_approval(given, "mcp__mail__send", {"to": "x@elsewhere.org"}) is None


def test_the_spec_refuses_bad_rules_with_field_errors() -> None:
    spec = JobSpec(prompt="p", approve_tools=["Bash", {"tool": "Bash", "match": "git push*"}])
    assert spec.approval_timeout_s == 86400 and spec.on_approval_timeout == "deny"
    for bad in (
        {"approve_tools": [{"tool": "Bash", "mtach": "x"}]},
        {"approve_tools": [""]},
        {"approval_timeout_s": 0},
        {"on_approval_timeout": "ignore"},
        {"approve_tools": ["Bash"], "permission_mode": "bypassPermissions"},
        {"approve_tools": ["Write"], "permission_mode": "acceptEdits"},
    ):
        with pytest.raises(ValidationError):
            JobSpec(prompt="p", **bad)


def test_a_tenant_gives_a_default() -> None:
    tenant = TenantConfig(name="t", approve_tools=[{"tool": "Bash", "match": "rm *"}])  # type: ignore[list-item]
    assert tenant.approve_tools == [ApprovalRule(tool="Bash", match="rm *")]


def test_at_submit_the_fields_are_named(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "t"\napprove_tools = ["Bash", {tool = "Write", match = "/etc/*"}]\n')
    settings = Settings(_env_file=None, tenants_file=tenants)  # type: ignore[call-arg]
    with pytest.raises(JobSpecError) as own:
        validate_spec({"prompt": "p", "approve_tools": ["Write"], "permission_mode": "acceptEdits"}, settings)
    assert [field for field, _ in own.value.errors] == ["approve_tools"]
    with pytest.raises(JobSpecError) as inherited:
        validate_spec({"prompt": "p", "tenant": "t", "permission_mode": "bypassPermissions"}, settings)
    assert ("permission_mode", "tenant t's approve_tools need permission_mode default") in inherited.value.errors
    assert validate_spec({"prompt": "p", "tenant": "t"}, settings).approve_tools == []  # applied by the worker
