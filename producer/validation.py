"""Submit-time validation: a bad spec is refused with the field and the reason, and nothing is written."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from claudeq.errors import JobSpecError
from claudeq.git_repo import workspace_problems
from claudeq.models import APPROVAL_MODES, JobSpec, WebhookSpec
from claudeq.permissions import spec_problems

from ..config.settings import Settings


def validate_spec(spec: JobSpec | dict[str, Any], settings: Settings) -> JobSpec:
    """Parse and check a spec against the fleet's limits and permission policy; JobSpecError lists every problem."""
    if isinstance(spec, dict):
        try:
            spec = JobSpec.model_validate(spec)
        except ValidationError as exc:
            raise JobSpecError(
                [(".".join(str(p) for p in err["loc"]) or "spec", _reason(err)) for err in exc.errors()]
            ) from None
    tenant = settings.tenants.get(spec.tenant)
    if spec.webhook is None and tenant is not None and tenant.webhook_url:
        # The tenant's webhook, for jobs that name none: in the spec, so the record says where the end goes.
        spec = spec.model_copy(update={"webhook": WebhookSpec(url=tenant.webhook_url, body=tenant.webhook_body)})
    problems = spec_problems(spec, settings)
    if (
        tenant is not None
        and tenant.approve_tools
        and not spec.approve_tools
        and spec.permission_mode not in APPROVAL_MODES
    ):
        # Its tenant's approve_tools apply: the CLI must ask (docs/jobs.md#tool-approval).
        problems.append(("permission_mode", f"tenant {tenant.name}'s approve_tools need permission_mode default"))
    if spec.workspace is not None and not any(field.startswith("workspace") for field, _ in problems):
        # What this host can tell of the repository (docs/jobs.md#coding-jobs); the worker checks again.
        problems += workspace_problems(
            spec.workspace, settings.policy, conversation=spec.conversation, resume=spec.resume, tenant=spec.tenant
        )
    if problems:
        raise JobSpecError(problems)
    return spec


def _reason(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "string_unicode":  # pydantic's own words for a lone surrogate
        return "holds a lone surrogate, which is not text (no UTF-8 form)"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")
