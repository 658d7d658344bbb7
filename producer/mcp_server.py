"""`claudeq mcp`: the fleet as an MCP server, so an agent (Claude Code, Claude Desktop, a claudeq job) hands work
to it and collects the results.

Tools: `submit_job`, `get_job`, `list_jobs`, `cancel_job`, `wait_job` (a bounded long-poll that reports progress
notifications while it waits) and `accounts`; and the schedules': `add_schedule`, `list_schedules`,
`pause_schedule`, `resume_schedule`, `remove_schedule` (each bound to the caller's tenant like the jobs).
Arguments go through the same validation as `Client.submit`, so a bad one comes back as a tool error naming the
field; answers are the records' public JSON form (no secret is ever in one).

A job submitted through a server bound to a parent job (the worker binds the server it offers a run to that run's
job; `claudeq mcp` started inside a run finds the id in CLAUDEQ_JOB_ID) records the parent in its metadata under
`parent_job_id` (`JobRecord.parent_job_id`).

This module imports `mcp`; `claudeq.producer.cli` imports it only when `claudeq mcp` runs.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import BaseModel, ConfigDict, Field

from claudeq.accounts import AccountStore
from claudeq.errors import ApprovalRefused, ClaudeqError, ConfigError, JobNotFound, JobSpecError, RecordUnreadable
from claudeq.follow import Ended, KeepAlive, follow
from claudeq.models import PARENT_JOB_KEY, JobRecord, JobSpec, JobStatus

from ..config.settings import Settings, load_settings
from ..config.tenants import DEFAULT_TENANT, Tenants
from .client import Client
from .progress import describe
from .signatures import field_parameters

SERVER_NAME = "claudeq"
#: The fleet's job tools, in the order they are listed (also what a run's fleet tools may name: worker/run/tools.py).
FLEET_TOOLS: tuple[str, ...] = ("submit_job", "get_job", "list_jobs", "cancel_job", "wait_job", "accounts")
#: The schedule tools `claudeq mcp` adds (not a run's: a run does not leave schedules behind it).
SCHEDULE_TOOLS: tuple[str, ...] = (
    "add_schedule",
    "list_schedules",
    "pause_schedule",
    "resume_schedule",
    "remove_schedule",
)
#: The approval tools `claudeq mcp` adds (never a run's: an agent does not approve its own tool uses).
APPROVAL_TOOLS: tuple[str, ...] = ("list_approvals", "decide_approval")
#: The variable a worker sets in a run's CLI environment (worker/run/cli_env.py JOB_ID_VAR).
JOB_ID_VAR = "CLAUDEQ_JOB_ID"
MAX_WAIT_S = 600.0
WAIT_POLL_S = 0.25
#: While nothing happens, a progress notification at least this often (keeps the caller informed and alive).
QUIET_PROGRESS_S = 2.0

INSTRUCTIONS = """\
claudeq runs Claude agent jobs in the background on a fleet of workers and accounts.
submit_job enqueues a job and returns its record (status `queued`); wait_job(job_id, timeout_s) waits for it,
reporting progress, and returns the record (`succeeded` with result.text / result.structured_output, or `failed` /
`cancelled` with error; still `queued`/`running` when the timeout passed: call wait_job again; `waiting_approval`:
a tool use of its agent waits for a person's decision: decide_approval where offered, or `claudeq approve`). To
fan work out, submit several jobs first, then wait for each."""

Text = Annotated[str, Field(min_length=1)]


def _problem(exc: JobSpecError) -> ToolError:
    return ToolError("invalid arguments: " + "; ".join(f"{field}: {reason}" for field, reason in exc.errors))


def _record_or_error(client: Client, job_id: str, tenant: str | None = None) -> JobRecord:
    """The job's record; a job of another tenant than the caller's (when bound to one) is as if missing."""
    try:
        record = client.get(job_id)
    except JobNotFound:
        raise ToolError(f"job_id: no job {job_id!r} (never submitted, or its retention expired)") from None
    except RecordUnreadable as exc:
        if tenant is not None:
            raise ToolError(f"job_id: no job {job_id!r} (never submitted, or its retention expired)") from None
        raise ToolError(f"job_id: record unreadable: {exc.detail}") from None
    if tenant is not None and record.spec.tenant != tenant:
        raise ToolError(f"job_id: no job {job_id!r} (never submitted, or its retention expired)")
    return record


def bearer_tenant(tenants: Tenants, authorization: str | None) -> str:
    """The tenant an HTTP caller's `Authorization: Bearer <token>` maps to (the tenants file's `mcp_token_env`);
    ToolError when the header is missing or the token is nobody's."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ToolError("authorization: this server needs `Authorization: Bearer <token>` (a tenant's MCP token)")
    tenant = tenants.by_token(token.strip())
    if tenant is None:
        raise ToolError("authorization: the bearer token is not any tenant's")
    return tenant.name


def build_server(
    client: Client,
    *,
    parent_job_id: str | None = None,
    tools: Iterable[str] | None = None,
    tenant: str | None = None,
    require_token: bool = False,
) -> MCPServer:
    """The MCP server over `client`'s fleet; `tools` limits the tools offered (default: every job and schedule
    tool).

    `tenant`: bound to that tenant (a run's fleet tools): every job it submits is that tenant's, and it sees no
    other tenant's jobs. `require_token` (HTTP with tenant tokens configured): each call's bearer token decides the
    tenant the same way; a call without a known token is refused."""
    offered = list((*FLEET_TOOLS, *SCHEDULE_TOOLS, *APPROVAL_TOOLS) if tools is None else dict.fromkeys(tools))
    unknown = [t for t in offered if t not in (*FLEET_TOOLS, *SCHEDULE_TOOLS, *APPROVAL_TOOLS)]
    if unknown:
        raise ValueError(f"unknown fleet tools: {', '.join(unknown)}")
    binding = _Binding(client, parent_job_id, tenant, require_token)
    functions: dict[str, Callable[..., Any]] = {
        **_approval_tools(binding),
        **_schedule_tools(binding),
        **_job_tools(binding),
        "wait_job": _wait_tool(binding),
        "accounts": _accounts_tool(binding),
    }
    served: list[Tool] = []
    for name in offered:
        # Every tool takes the call's context and asks `caller` first: that is where a bearer token is checked.
        if "ctx" not in inspect.signature(functions[name]).parameters:
            raise RuntimeError(f"fleet tool {name} does not check its caller")
        served.append(_strict(Tool.from_function(functions[name], name=name)))
    return MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING", tools=served)


@dataclass(frozen=True)
class _Binding:
    """What every tool of one server shares: the fleet's client, the job it was offered to, and whom it acts for."""

    client: Client
    parent_job_id: str | None
    tenant: str | None
    require_token: bool

    def caller(self, ctx: Context) -> str | None:
        """The tenant this call is bound to (None: any)."""
        if self.tenant is not None:
            return self.tenant
        if not self.require_token:
            return None
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        tenants = self.client.settings.tenants
        return bearer_tenant(tenants, headers.get("authorization") if headers is not None else None)


def _job_tools(binding: _Binding) -> dict[str, Callable[..., Any]]:
    """`submit_job`, `get_job`, `list_jobs` and `cancel_job`."""
    client, caller, parent_job_id = binding.client, binding.caller, binding.parent_job_id

    async def submit_job(ctx: Context, **given: Any) -> dict[str, Any]:
        """Submit a job to the claudeq fleet; returns its record (status `queued`). Then use wait_job. Takes every
        field of a job spec (docs/jobs.md); an unknown one is refused."""
        bound = caller(ctx)
        tenant = given.get("tenant")
        if bound is not None and tenant is not None and tenant != bound:
            raise ToolError(f"tenant: this caller submits as tenant {bound!r} only")
        fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if bound is not None:
            fields["tenant"] = bound
        metadata = fields.pop("metadata", None)
        labels: dict[str, Any] = dict(metadata or {})
        if parent_job_id:
            labels[PARENT_JOB_KEY] = parent_job_id  # a run cannot claim another parent
        if labels:
            fields["metadata"] = labels
        try:
            handle = await asyncio.to_thread(client.submit, fields)
        except JobSpecError as exc:
            raise _problem(exc) from None
        record = await asyncio.to_thread(_record_or_error, client, handle.id, bound)
        return {**record.public(), "created": handle.created}

    async def get_job(job_id: Annotated[str, Field(description="The job's id.")], ctx: Context) -> dict[str, Any]:
        """A job's current record: status, attempts, account, result (text, structured output, usage) or error."""
        return (await asyncio.to_thread(_record_or_error, client, job_id, caller(ctx))).public()

    async def list_jobs(
        ctx: Context,
        status: Annotated[
            JobStatus | None, Field(description="Only jobs in this status (queued, deferred, running, …).")
        ] = None,
        parent_job_id: Annotated[str | None, Field(description="Only jobs submitted by this job.")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many, newest first.")] = 20,
    ) -> dict[str, Any]:
        """Recent jobs, newest first, optionally only one status and/or the children of one job."""
        # A bound caller's jobs come from its tenant's own index, a parent's children from the jobs created since it:
        # exact however many jobs others submit (Client.list).
        listing = functools.partial(client.list, status, limit, tenant=caller(ctx), parent_job_id=parent_job_id)
        items = await asyncio.to_thread(listing)
        return {
            "jobs": [
                {"id": item.job_id, "unreadable": item.detail} if isinstance(item, RecordUnreadable) else item.public()
                for item in items
            ]
        }

    async def cancel_job(job_id: Annotated[str, Field(description="The job's id.")], ctx: Context) -> dict[str, Any]:
        """Cancel a job: at once when it waits; a running job is stopped within about a second."""
        bound = caller(ctx)
        if bound is not None:
            await asyncio.to_thread(_record_or_error, client, job_id, bound)
        try:
            result = await asyncio.to_thread(client.cancel, job_id)
        except JobNotFound:
            raise ToolError(f"job_id: no job {job_id!r}") from None
        return {"id": job_id, "result": result}

    submit_job.__signature__ = SUBMIT_SIGNATURE  # type: ignore[attr-defined]
    return {"submit_job": submit_job, "get_job": get_job, "list_jobs": list_jobs, "cancel_job": cancel_job}


def _wait_tool(binding: _Binding) -> Callable[..., Any]:
    """`wait_job`: a bounded long-poll reporting the job's progress."""
    client, caller = binding.client, binding.caller

    async def wait_job(
        job_id: Annotated[str, Field(description="The job's id.")],
        ctx: Context,
        timeout_s: Annotated[float, Field(description=f"Wait at most this many seconds (0 .. {MAX_WAIT_S:g}).")] = 60.0,
    ) -> dict[str, Any]:
        """Wait until the job finishes or `timeout_s` passes, reporting progress; returns the current record
        (check `status`: still `queued`/`running` means the timeout passed first)."""
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise ToolError(f"invalid arguments: timeout_s: must be between 0 and {MAX_WAIT_S:g}")
        store = client.store
        bound = caller(ctx)
        await asyncio.to_thread(_record_or_error, client, job_id, bound)
        started = time.monotonic()
        deadline = started + timeout_s
        # Progress covers what happens while we wait, not the job's history.
        tail: Any = await asyncio.to_thread(store.redis.xrevrange, store.keys.events(job_id), "+", "-", 1)
        after = tail[0][0].decode() if tail else "0-0"
        step = 0
        # claudeq/follow.py's loop, to the job's end or the deadline; quiet for QUIET_PROGRESS_S, it says the status.
        followed = follow(store, job_id, after, poll_s=WAIT_POLL_S, keepalive_s=QUIET_PROGRESS_S, until=deadline)
        async for item in followed:
            if isinstance(item, Ended):
                if item.status != "gone":  # an end the replicas hold (CLAUDEQ_REDIS_WAIT_REPLICAS), as Client.wait
                    await asyncio.to_thread(client.until_replicated, job_id)
                continue  # the last item
            if isinstance(item, KeepAlive):
                message: str | None = f"{item.status}, waited {time.monotonic() - started:.0f} s"
            else:
                message = describe(item[1])
            if message is not None:
                step += 1
                await ctx.report_progress(step, None, message)
        return (await asyncio.to_thread(_record_or_error, client, job_id, bound)).public()

    return wait_job


def _accounts_tool(binding: _Binding) -> Callable[..., Any]:
    """`accounts`: the pool's states."""
    client, caller, settings = binding.client, binding.caller, binding.client.settings

    async def accounts(ctx: Context) -> dict[str, Any]:
        """The fleet's accounts: state (ok, warning, cooling, disabled), slots in use, cooldown, utilization."""
        caller(ctx)  # with tenant tokens, names, states and slots are not for anonymous callers either
        try:
            pool = settings.accounts
        except ConfigError as exc:
            raise ToolError(f"accounts are not configured here: {exc}") from None
        store = AccountStore(client.store.redis, client.store.keys, pool)
        states = await asyncio.to_thread(store.states)
        return {"accounts": [s.public() for s in states]}

    return accounts


@dataclass(frozen=True)
class ScheduleArgs:
    """add_schedule's arguments, one field each (its input schema: ADD_SCHEDULE_SIGNATURE)."""

    name: Annotated[str, Field(description="The schedule's name (its tenant's own).")]
    prompt: Annotated[str, Field(description="The prompt of every job it fires.")]
    cron: Annotated[str | None, Field(description="A cron expression, e.g. '0 2 * * *'.")] = None
    every_s: Annotated[int | None, Field(description="Or: every this many seconds.")] = None
    tz: Annotated[str, Field(description="The time zone the cron expression is read in.")] = "UTC"
    on_missed: Annotated[str, Field(description="A tick no worker reached in time: skip, or run_once.")] = "skip"
    spec: Annotated[dict[str, Any] | None, Field(description="More spec fields of its jobs: tools, model, cwd, …")] = (
        None
    )
    replace: Annotated[bool, Field(description="Replace a schedule of that name.")] = False
    tenant: Annotated[str | None, Field(description="Whose schedule (fixed when the caller is bound).")] = None


def _schedule_signature() -> inspect.Signature:
    """The signature the MCP server reads add_schedule's arguments (and its input schema) from: the call's context,
    then ScheduleArgs's fields."""
    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    params += field_parameters(ScheduleArgs)
    return inspect.Signature(params, return_annotation=dict[str, Any])


ADD_SCHEDULE_SIGNATURE = _schedule_signature()


def _schedule_tools(binding: _Binding) -> dict[str, Callable[..., Any]]:
    """`add_schedule`, `list_schedules` and `pause_`, `resume_` and `remove_schedule`, on the caller's tenant."""
    client, caller, parent_job_id = binding.client, binding.caller, binding.parent_job_id

    def schedule_tenant(ctx: Context, tenant: str | None) -> str:
        bound = caller(ctx)
        if bound is not None and tenant is not None and tenant != bound:
            raise ToolError(f"tenant: this caller's schedules are tenant {bound!r}'s only")
        return bound or tenant or DEFAULT_TENANT

    async def add_schedule(ctx: Context, **given: Any) -> dict[str, Any]:
        """Have the fleet submit a job on a cron expression or an interval, exactly once per tick."""
        args = ScheduleArgs(**given)
        owner = schedule_tenant(ctx, args.tenant)
        fields = {**(args.spec or {}), "prompt": args.prompt, "tenant": owner}
        if parent_job_id:
            fields["metadata"] = {**fields.get("metadata", {}), PARENT_JOB_KEY: parent_job_id}
        add = functools.partial(
            client.add_schedule,
            args.name,
            fields,
            cron=args.cron,
            every_s=args.every_s,
            tz=args.tz,
            on_missed=args.on_missed,
            replace=args.replace,
        )
        try:
            schedule = await asyncio.to_thread(add)
        except JobSpecError as exc:
            raise _problem(exc) from None
        except ClaudeqError as exc:
            raise ToolError(str(exc)) from None
        return schedule.model_dump(mode="json")

    add_schedule.__signature__ = ADD_SCHEDULE_SIGNATURE  # type: ignore[attr-defined]

    async def list_schedules(
        ctx: Context,
        tenant: Annotated[str | None, Field(description="Only this tenant's (fixed when the caller is bound).")] = None,
    ) -> dict[str, Any]:
        """Schedules with their next tick and what they fired."""
        bound = caller(ctx)
        if bound is not None and tenant is not None and tenant != bound:
            raise ToolError(f"tenant: this caller's schedules are tenant {bound!r}'s only")
        infos = await asyncio.to_thread(client.schedules, bound or tenant)
        return {"schedules": [info.model_dump(mode="json") for info in infos]}

    def schedule_action(action: str) -> Callable[..., Any]:
        async def act(
            name: Annotated[str, Field(description="The schedule's name.")],
            ctx: Context,
            tenant: Annotated[str | None, Field(description="Whose schedule (fixed when the caller is bound).")] = None,
        ) -> dict[str, Any]:
            owner = schedule_tenant(ctx, tenant)
            try:
                await asyncio.to_thread(getattr(client, f"{action}_schedule"), name, owner)
            except ClaudeqError as exc:
                raise ToolError(f"name: {exc}") from None
            return {"name": name, "tenant": owner, "done": action}

        act.__doc__ = {
            "pause": "Stop a schedule firing until it is resumed.",
            "resume": "Fire a paused schedule again from its next tick after now (paused ticks are not made up).",
            "remove": "Delete a schedule (the jobs it fired stay).",
        }[action]
        return act

    return {
        "add_schedule": add_schedule,
        "list_schedules": list_schedules,
        "pause_schedule": schedule_action("pause"),
        "resume_schedule": schedule_action("resume"),
        "remove_schedule": schedule_action("remove"),
    }


def _approval_tools(binding: _Binding) -> dict[str, Callable[..., Any]]:
    """`list_approvals` and `decide_approval`."""
    client, caller = binding.client, binding.caller

    async def list_approvals(ctx: Context) -> dict[str, Any]:
        """The jobs waiting for a person's approval of a tool use now (the caller's tenant's only, with a bearer
        token): each record's `approval` holds the request (`request_id`, `tool`, `input`, `expires_at`)."""
        bound = caller(ctx)
        records = await asyncio.to_thread(client.approvals, bound)
        return {"approvals": [r.public() for r in records]}

    async def decide_approval(
        job_id: Annotated[str, Field(description="The job's id.")],
        ctx: Context,
        approve: Annotated[bool, Field(description="true: the tool runs; false: denied, the model is told.")],
        reason: Annotated[str | None, Field(description="Why (the model gets it with a denial).")] = None,
        request_id: Annotated[str | None, Field(description="The request id (default: the pending one).")] = None,
    ) -> dict[str, Any]:
        """Answer the tool use a job waits on, once: as the caller's tenant (its own jobs only) or the operator."""
        bound = caller(ctx)
        try:
            answered = await asyncio.to_thread(
                functools.partial(client.approve, job_id, approve, reason, request_id=request_id, tenant=bound)
            )
        except JobNotFound:
            raise ToolError(f"job_id: no job {job_id!r}") from None
        except ApprovalRefused as exc:
            raise ToolError(f"{exc.why}: {exc}") from None
        return {"id": job_id, "approval": answered.model_dump(mode="json")}

    return {"list_approvals": list_approvals, "decide_approval": decide_approval}


def _strict(tool: Tool) -> Tool:
    """`tool` refusing arguments it does not take (a typo such as `max_turn` is an error naming it, never silently
    dropped) and saying so in its input schema."""
    loose = tool.fn_metadata.arg_model
    config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")
    strict: type[BaseModel] = type(loose.__name__, (loose,), {"model_config": config, "__module__": loose.__module__})
    tool.fn_metadata.arg_model = strict  # type: ignore[assignment]  # a subclass of the loose one
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


def _spec_parameters() -> list[inspect.Parameter]:
    """submit_job's arguments: every field of JobSpec, typed and described as the spec has them (the spec's own
    checks then run in `Client.submit`, the one validation path)."""
    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for name, field in JobSpec.model_fields.items():
        description = field.description or name.replace("_", " ")
        if name == "prompt":
            annotation: Any = Annotated[str, Field(description=description)]
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation))
            continue
        annotation = Annotated[field.annotation | None, Field(description=description)]  # type: ignore[operator]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None))
    return params


#: The signature the MCP server reads submit_job's arguments (and its input schema) from.
SUBMIT_SIGNATURE = inspect.Signature(_spec_parameters(), return_annotation=dict[str, Any])


def parse_address(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) -> (host, port); ValueError with a readable message otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def serve(http: str | None = None, settings: Settings | None = None) -> None:
    """Run the server on stdio, or streamable HTTP at `http` (`HOST:PORT`, path /mcp). Blocks."""
    settings = settings or load_settings()
    client = Client(settings)
    tokens = http is not None and settings.tenants.token_mapping
    parent = os.environ.get(JOB_ID_VAR) or None
    tenant = None
    if parent is not None:  # started inside a run: its jobs are the run's tenant's, as the run's fleet tools
        try:
            tenant = client.get(parent).spec.tenant
        except (JobNotFound, RecordUnreadable):
            tenant = None
    server = build_server(client, parent_job_id=parent, require_token=tokens, tenant=tenant)
    try:
        if http is None:
            server.run("stdio")
            return
        host, port = parse_address(http)
        if tokens:
            print("claudeq mcp: each call needs a tenant's bearer token (mcp_token_env)", file=sys.stderr)
        elif host not in ("127.0.0.1", "localhost", "::1"):
            print(
                f"warning: claudeq mcp on {host} lets anyone who reaches it submit jobs (no authentication)",
                file=sys.stderr,
            )
        print(f"claudeq mcp: streamable HTTP on http://{http}/mcp", file=sys.stderr, flush=True)
        server.run("streamable-http", host=host, port=port)
    finally:
        client.close()
