"""The permission policy: what a job may ask for on this fleet (tools, directories, permission modes, sizes).

Both sides apply it: the producer refuses a spec at submit (`spec_problems`, via claudeq.producer.validation) and
the worker checks it again before a run (`spec_problems` and `check_spec`, which also knows the worker's registered
MCP tools and the local file system). Not to be confused with the failure policy
(claudeq.worker.delivery.failure), which decides what happens after an attempt.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from claudeq.config.settings import TOOL_PROFILES, Settings, WorkerPolicy, callback_queue_problem
from claudeq.dependencies import placeholder_problems
from claudeq.errors import PolicyViolation
from claudeq.models import CONTROL_CHARS, JobSpec


class ToolNames(Protocol):
    """The worker's MCP tool registry, as the permission check sees it."""

    def unknown(self, names: list[str]) -> list[str]:
        """Those of `names` that are not registered."""

    def mixes_fleet(self, names: list[str]) -> bool:
        """Whether `names` combine fleet tools with worker-registered ones."""


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


def spec_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """What in `spec` the fleet's limits or its permission policy refuse, as (field, reason) pairs."""
    problems: list[tuple[str, str]] = []
    size = len(spec.prompt.encode())
    if size > settings.max_prompt_bytes:
        problems.append(
            (
                "prompt",
                f"is {size} bytes; the limit is {settings.max_prompt_bytes} (CLAUDEQ_MAX_PROMPT_BYTES)",
            )
        )
    spec_size = len(spec.model_dump_json(exclude_defaults=True).encode())  # as stored (claudeq/jobs/_store.py)
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
    if spec.concurrency_limit != 1 and spec.concurrency_key is None:
        problems.append(("concurrency_limit", "needs a concurrency_key (the jobs it limits)"))
    if spec.workspace is not None:
        if spec.cwd:
            problems.append(("workspace", "give either workspace (the job's own worktree) or cwd, not both"))
        if not policy.path_allowed(spec.workspace.repo):
            roots = ", ".join(str(r) for r in policy.workspace_roots) or "none configured"
            problems.append(("workspace.repo", f"{spec.workspace.repo} is outside the workspace roots ({roots})"))
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
    if spec.account:  # the pool's names are listed only for a spec that names an account
        names = settings.accounts.names
        if names and spec.account not in names:
            problems.append(("account", f"no account named {spec.account!r} (configured: {', '.join(names)})"))
    problems += tenant_problems(spec, settings)
    if spec.webhook is not None:
        wrong = webhook_problem(spec.webhook.url, settings.webhook_hosts, settings.webhook_ports)
        if wrong:
            problems.append(("webhook.url", wrong))
        elif not _webhook_signed(spec, settings):
            problems.append(
                (
                    "webhook",
                    "no secret would sign its notifications: set CLAUDEQ_WEBHOOK_SECRET (or the tenant's "
                    "webhook_secret_env in the tenants file)",
                )
            )
    problems += placeholder_problems(spec)
    problems += callback_problems(spec, settings)
    problems += model_problems(spec, settings)
    return problems


#: Spec fields about a job's end notifications: what is wrong with them fails the notification, never the run.
NOTIFICATION_FIELDS = frozenset({"webhook", "link", "link_error"})


def run_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """`spec_problems` as a worker checks them before a run: a notification the worker's settings refuse (a webhook
    host it does not allow, a callback queue) goes dead at delivery with that reason; it does not fail the job."""
    return [(f, r) for f, r in spec_problems(spec, settings) if f.split(".", 1)[0] not in NOTIFICATION_FIELDS]


def _webhook_signed(spec: JobSpec, settings: Settings) -> bool:
    tenant = settings.tenants.governing(spec.tenant)
    return settings.webhook_secret is not None or tenant.webhook_secret_env is not None


def callback_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """A `link` / `link_error` queue outside the allow-list — the tenant's `callback_queues` in the tenants file,
    else CLAUDEQ_CALLBACK_QUEUES — or one that is shared state (claudeq's keys and queues, kombu's keys): a tenant
    never names a key it does not own."""
    tenants = settings.tenants
    if tenants.configured:
        allowed = tenants.governing(spec.tenant).callback_queues
        where = f"tenant {spec.tenant!r}'s callback_queues in the tenants file"
    else:
        allowed = settings.callback_queues
        where = "CLAUDEQ_CALLBACK_QUEUES"
    problems: list[tuple[str, str]] = []
    for field, callback in (("link", spec.link), ("link_error", spec.link_error)):
        if callback is None:
            continue
        wrong = callback_queue_problem(callback.queue, settings.key_prefix, settings.job_queues)
        if wrong is None and callback.queue not in allowed:
            wrong = (
                f"{callback.queue!r} is not a callback queue the fleet allows ({where}: {', '.join(allowed) or 'none'})"
            )
        if wrong:
            problems.append((f"{field}.queue", wrong))
    return problems


#: The model aliases the Claude CLI resolves itself (docs/jobs.md#the-job-spec).
CLI_MODEL_ALIASES = frozenset({"default", "sonnet", "opus", "haiku", "opusplan", "best", "sonnet[1m]", "opus[1m]"})
#: A Claude model id, also as cloud providers spell it (`us.anthropic.claude-…`, `claude-…@20250101`, `…-v1:0`).
CLAUDE_MODEL_ID = re.compile(
    r"^(?:[a-z]{2,4}\.)?(?:anthropic\.)?claude-[a-z0-9][a-z0-9.-]*(?:@\d+)?(?:-v\d+:\d+)?(?:\[1m\])?$"
)


def model_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """Models the fleet cannot run: neither one of the CLI's aliases, nor a Claude model id, nor one the operator
    lists (an account's or a tenant's `models`). Refused at submit rather than after the API's 404 on every try."""
    listed: set[str] | None = None  # the models the operator lists: gathered only for a model neither rule admits
    problems: list[tuple[str, str]] = []
    for field, model in spec_models(spec):
        if model is None or model in CLI_MODEL_ALIASES or CLAUDE_MODEL_ID.match(model.lower()):
            continue
        if listed is None:
            listed = {m for account in settings.accounts.accounts for m in account.models}
            listed |= {m for tenant in settings.tenants.tenants for m in tenant.models or []}
        if model in listed:
            continue
        problems.append(
            (
                field,
                f"{model!r} is not a model the fleet can run: give an alias ({', '.join(sorted(CLI_MODEL_ALIASES))}), "
                "a Claude model id (claude-…) or a model the accounts or tenants list",
            )
        )
    return problems


#: The ports a webhook URL may always name (others: CLAUDEQ_WEBHOOK_PORTS).
WEBHOOK_PORTS = (80, 443)


def webhook_problem(url: str, hosts: list[str], ports: list[int] | None = None) -> str | None:
    """Why the fleet refuses `url` as a webhook, or None: an http(s) URL on an allowed host (exactly, or a subdomain
    of a `*.example.com` entry) and port (80, 443 or one of `ports`), with no credentials in it (the URL is stored
    in the job's record). Where it resolves to is checked when it is sent (worker/background/webhook_target.py)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # a bad port raises here
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if port == 0:
        return "port 0 is not a port"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (the URL is stored in the record; receivers verify the signature)"
    if CONTROL_CHARS.search(url):
        return "holds a control character"
    effective = port if port is not None else (443 if parts.scheme == "https" else 80)
    allowed_ports = [*WEBHOOK_PORTS, *(ports or [])]
    if effective not in allowed_ports:
        listed = ", ".join(str(p) for p in allowed_ports)
        return f"port {effective} is not one webhooks may use ({listed}; CLAUDEQ_WEBHOOK_PORTS)"
    host = parts.hostname.lower().rstrip(".")
    for allowed in hosts:
        allowed = allowed.lower().rstrip(".")
        if host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:])):
            return None
    listed = ", ".join(hosts) or "none"
    return f"host {host!r} is not one the fleet allows (CLAUDEQ_WEBHOOK_HOSTS: {listed})"


def spec_models(spec: JobSpec) -> list[tuple[str, str | None]]:
    """Every model a run of `spec` may answer on, by field: `model` (None: the CLI's default) and `fallback_model`
    when set, which the CLI switches to by itself (after repeated 529s, when its own retries are on), so a model
    allow-list that skipped it would not hold."""
    models: list[tuple[str, str | None]] = [("model", spec.model)]
    if spec.fallback_model is not None:
        models.append(("fallback_model", spec.fallback_model))
    return models


def tenant_problems(spec: JobSpec, settings: Settings) -> list[tuple[str, str]]:
    """What the tenants file refuses in `spec`: an unknown tenant, or an account, model or tool profile outside the
    tenant's allow-lists."""
    tenants = settings.tenants
    if not tenants.known(spec.tenant):
        # Other tenants' names are theirs: the refusal does not list them.
        return [("tenant", f"{spec.tenant!r} is not a configured tenant (CLAUDEQ_TENANTS_FILE)")]
    tenant = tenants.governing(spec.tenant)
    problems: list[tuple[str, str]] = []
    if tenant.accounts is not None and spec.account is not None and spec.account not in tenant.accounts:
        problems.append(("account", f"{spec.account!r} is not one of tenant {spec.tenant!r}'s accounts"))
    if tenant.models is not None:
        allowed = ", ".join(tenant.models) or "none"
        for field, model in spec_models(spec):
            if model is None or model not in tenant.models:
                named = model or "the default model"
                problems.append((field, f"{named} is not allowed for tenant {spec.tenant!r} (allowed: {allowed})"))
    if tenant.tool_profiles is not None:
        if isinstance(spec.tools, str):
            if spec.tools not in tenant.tool_profiles:
                problems.append(("tools", f"profile {spec.tools!r} is not allowed for tenant {spec.tenant!r}"))
        else:
            offered = {t for p in tenant.tool_profiles for t in TOOL_PROFILES.get(p, [])}
            outside = [t for t in spec.tools if t not in offered]
            if outside:
                problems.append(("tools", f"{', '.join(outside)} not in tenant {spec.tenant!r}'s tool profiles"))
    return problems


def allowed_builtin_tools(spec: JobSpec, policy: WorkerPolicy) -> list[str]:
    """The built-in tools a job gets (its profile or list); PolicyViolation when the policy forbids one."""
    tools = policy.tools_for(spec.tools)
    forbidden = policy.forbidden_tools(tools)
    if forbidden:
        raise PolicyViolation("tools", f"not allowed on this fleet: {', '.join(forbidden)}")
    return tools


def check_spec(spec: JobSpec, policy: WorkerPolicy, registry: ToolNames | None) -> None:
    """Raise PolicyViolation if the policy forbids anything the spec asks for (no I/O beyond stat of dirs)."""
    allowed_builtin_tools(spec, policy)
    if spec.mcp_tools:
        unknown = spec.mcp_tools if registry is None else registry.unknown(spec.mcp_tools)
        if unknown:
            raise PolicyViolation("mcp_tools", f"not registered on this worker: {', '.join(unknown)}")
        if registry is not None and registry.mixes_fleet(spec.mcp_tools):
            raise PolicyViolation("mcp_tools", "fleet tools and worker-registered tools cannot be combined in one job")
    if spec.permission_mode is not None and spec.permission_mode not in policy.permission_modes:
        raise PolicyViolation("permission_mode", f"{spec.permission_mode!r} is not allowed on this fleet")
    for field, paths in (("cwd", [spec.cwd] if spec.cwd else []), ("add_dirs", spec.add_dirs)):
        for path in paths:
            if not policy.workspace_roots:
                raise PolicyViolation(field, "this fleet has no workspace roots; jobs cannot set a directory")
            if not policy.path_allowed(path):
                raise PolicyViolation(field, f"{path} is outside the workspace roots")
            if not Path(path).is_dir():
                raise PolicyViolation(field, f"{path} is not a directory")
