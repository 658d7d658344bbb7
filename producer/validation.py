"""Submit-time validation: a bad spec is refused with the field and the reason, and nothing is written."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobSpec

#: Linux's MAX_ARG_STRLEN: one command-line argument holds at most this many bytes, its terminating NUL included.
MAX_ARG_STRLEN = 128 * 1024


def argv_problems(spec: JobSpec) -> list[tuple[str, str]]:
    """Spec fields the worker passes to the CLI as one command-line argument, where they are too big for one.

    The system prompts are not among them: the worker hands them to the CLI as files (any size the spec allows)."""
    limit = MAX_ARG_STRLEN - 1
    args: list[tuple[str, str]] = [
        ("model", spec.model or ""),
        ("fallback_model", spec.fallback_model or ""),
        ("resume", spec.resume or ""),
        *(("add_dirs", path) for path in spec.add_dirs),
    ]
    if spec.output_schema is not None:
        args.append(("output_schema", json.dumps(spec.output_schema)))  # as the SDK serialises it
    problems = []
    for field, value in args:
        size = len(value.encode())
        if size > limit:
            problems.append(
                (
                    field,
                    f"is {size} bytes on the CLI's command line; one argument holds at most {limit} (MAX_ARG_STRLEN)",
                )
            )
    return problems


def validate_spec(spec: JobSpec | dict[str, Any], settings: Settings) -> JobSpec:
    """Parse and check a spec against the fleet's limits and policy; JobSpecError lists every problem."""
    if isinstance(spec, dict):
        try:
            spec = JobSpec.model_validate(spec)
        except ValidationError as exc:
            raise JobSpecError(
                [(".".join(str(p) for p in err["loc"]) or "spec", _reason(err)) for err in exc.errors()]
            ) from None
    problems = policy_problems(spec, settings)
    if problems:
        raise JobSpecError(problems)
    return spec


def policy_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """What in `spec` the limits or the worker policy refuse, as (field, reason) pairs."""
    problems: list[tuple[str, str]] = []
    size = len(spec.prompt.encode())
    if size > settings.max_prompt_bytes:
        problems.append(
            (
                "prompt",
                f"is {size} bytes; the limit is {settings.max_prompt_bytes} (CLAUDEQ_MAX_PROMPT_BYTES)",
            )
        )
    spec_size = len(spec.model_dump_json().encode())
    if spec_size > settings.max_spec_bytes and size <= settings.max_prompt_bytes:
        problems.append(("spec", f"is {spec_size} bytes; the limit is {settings.max_spec_bytes}"))
    problems += argv_problems(spec)
    policy = settings.policy
    forbidden = policy.forbidden_tools(policy.tools_for(spec.tools))
    if forbidden:
        problems.append(("tools", f"{', '.join(forbidden)} not allowed by the worker policy"))
    for field, paths in (("cwd", [spec.cwd] if spec.cwd else []), ("add_dirs", spec.add_dirs)):
        for path in paths:
            if not policy.path_allowed(path):
                roots = ", ".join(str(r) for r in policy.workspace_roots) or "none configured"
                problems.append((field, f"{path} is outside the workspace roots ({roots})"))
    if spec.permission_mode and spec.permission_mode not in policy.permission_modes:
        problems.append(("permission_mode", f"{spec.permission_mode} is not allowed by the worker policy"))
    if spec.deadline_s and spec.deadline_s > settings.max_deadline_s:
        problems.append(("deadline_s", f"above the fleet's maximum of {settings.max_deadline_s:g} s"))
    if spec.queue is not None and spec.queue not in settings.job_queues:
        problems.append(
            (
                "queue",
                f"{spec.queue!r} is not a configured queue (allowed: {', '.join(settings.job_queues)};"
                " CLAUDEQ_QUEUE and CLAUDEQ_QUEUES)",
            )
        )
    names = settings.accounts.names
    if spec.account and names and spec.account not in names:
        problems.append(("account", f"no account named {spec.account!r} (configured: {', '.join(names)})"))
    return problems


def _reason(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")
