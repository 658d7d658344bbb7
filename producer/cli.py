"""`claudeq`: submit, follow and operate jobs from the shell. Every command has `--json` for scripts.

Exit codes: 0 ok, 1 runtime error (Redis unreachable, …), 2 bad input (the spec was refused: nothing written),
3 the job finished but did not succeed, 4 waiting timed out (the job goes on), 5 no such job.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import redis
import typer
from rich.console import Console
from rich.text import Text

from claudeq import connections
from claudeq.errors import ClaudeqError, ConfigError, JobNotFound, JobSpecError, JobTimeout, RecordUnreadable
from claudeq.follow import Ended, KeepAlive, blocking, follow
from claudeq.models import TERMINAL, JobRecord, JobStatus
from claudeq.schedules import ScheduleNotFound

from ..config.account_pool import AccountConfig
from ..config.settings import Settings, load_settings
from ..config.tenants import DEFAULT_TENANT
from .cli_accounts import accounts_app
from .cli_batch import submit_from_file
from .cli_checks import redis_warnings, tenants_report
from .cli_conversation import conversation_app
from .cli_options import options_command
from .cli_output import CliConsole, print_table, styled
from .cli_workspaces import artifacts, diff, stat_line, workspaces_app
from .client import Client
from .extras import exit_missing
from .progress import line
from .transcript_view import block_line, conversation

JOB_STATUSES: tuple[str, ...] = typing.get_args(JobStatus)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_JOB_FAILED = 3
EXIT_TIMEOUT = 4
EXIT_NOT_FOUND = 5

#: A job still queued this long (s) with no live worker for its queue gets a notice while it is followed.
NO_WORKER_NOTICE_S = 3.0

app = typer.Typer(
    name="claudeq",
    help="Run Claude agent jobs in the background: submit, follow, cancel, operate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(accounts_app, name="accounts")
app.add_typer(conversation_app, name="conversation")
schedule_app = typer.Typer(help="Jobs the fleet submits on a cron expression or an interval.", no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")
webhooks_app = typer.Typer(
    help="End notifications (webhooks, Celery callbacks) the fleet gave up on, and trying them again.",
    no_args_is_help=True,
)
app.add_typer(webhooks_app, name="webhooks")
app.command("diff")(diff)
app.command("artifacts")(artifacts)
app.add_typer(workspaces_app, name="workspaces")

out = CliConsole()
err = CliConsole(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

#: How a job's status is coloured on a terminal (any other: cyan).
_STATUS_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}

#: The exporter's default port (workers use 9808, .env.example).
EXPORTER_PORT = 9809


@app.command("exporter")
def exporter(
    port: Annotated[
        int, typer.Option("--port", envvar="CLAUDEQ_EXPORTER_PORT", help="Port of /metrics.")
    ] = EXPORTER_PORT,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            "--addr",
            envvar=["CLAUDEQ_EXPORTER_HOST", "CLAUDEQ_EXPORTER_ADDR"],
            help="Address to listen on (loopback by default, as `web` and `mcp`; 0.0.0.0 for every interface).",
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve cluster-wide gauges (queues, jobs, accounts, workers) read from Redis at scrape time."""
    # Fleet code (prometheus_client): loaded when the exporter runs, never by a producer importing the CLI.
    try:
        from ..worker.metrics.exporter import exporter_command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq exporter", exc)

    exporter_command(port, host)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"configuration: {exc}")


def _client() -> Client:
    return Client(_settings())


def _fail(code: int, message: str, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        print(json.dumps({"error": message, **extra}))
    else:
        err.print(styled(("error:", "red"), f" {message}"))
    raise typer.Exit(code)


def _guard(fn: Any) -> Any:
    """Map claudeq errors to exit codes with one clear line (no tracebacks for expected failures)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except JobSpecError as exc:
            _fail(EXIT_BAD_INPUT, str(exc), as_json, fields=[{"field": f, "reason": r} for f, r in exc.errors])
        except (JobNotFound, ScheduleNotFound) as exc:
            _fail(EXIT_NOT_FOUND, str(exc), as_json)
        except JobTimeout as exc:
            _fail(EXIT_TIMEOUT, str(exc), as_json)
        except RecordUnreadable as exc:
            _fail(EXIT_ERROR, str(exc), as_json)
        except ConfigError as exc:
            _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json)
        except redis.RedisError as exc:
            _fail(EXIT_ERROR, f"Redis: {exc.__class__.__name__}: {exc}", as_json)
        except ClaudeqError as exc:
            _fail(EXIT_ERROR, str(exc), as_json)

    return functools.wraps(fn)(wrapper)


def _read_text_arg(value: str, field: str = "prompt") -> str:
    """`-` reads stdin, `@path` reads a file, anything else is taken as is."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@"):
        try:
            return Path(value[1:]).read_text()
        except OSError as exc:
            raise JobSpecError([(field, f"cannot read {value[1:]}: {exc.strerror}")]) from None
    return value


def _read_file_arg(value: str | None, field: str) -> str | None:
    """`@path` reads a file (a shell cannot pass more than 128 KiB in one argument), anything else is taken as is."""
    if value is None or not value.startswith("@"):
        return value
    return _read_text_arg(value, field)


def _print_record(record: JobRecord, as_json: bool, waits: str | None = None) -> None:
    """The record as JSON, or for a person: status, attempts, usage, why it waits (`waits`), its error, its answer."""
    if as_json:
        print(json.dumps(record.public()))
        return
    colour = _STATUS_STYLE.get(record.shown_status, "cyan")
    out.print(styled((record.id, "bold"), "  ", (record.shown_status, colour)))
    rows: list[tuple[str, str]] = [
        ("account", record.account or "-"),
        ("session", record.session_id or "-"),
        ("attempts", ", ".join(f"{a.number}:{a.account or '-'}:{a.outcome or 'running'}" for a in record.attempts)),
        ("created", record.created_at.isoformat()),
    ]
    if waits:
        rows.append(("waiting", waits))
    elif record.ready_at and not record.finished:
        rows.append(("ready at", record.ready_at.isoformat()))
    if record.waiting_approval and record.approval is not None:  # `claudeq approve` answers it
        pending = record.approval
        rows.append(("approval", f"{pending.request_id}: {pending.tool} {json.dumps(pending.input)[:200]}"))
    if not waits and record.status == "deferred" and record.wait_reason:  # `_why_waiting` read nothing
        rows.append(("waiting", record.wait_reason))
    if record.workspace is not None:  # a coding job's change (claudeq diff JOB shows the patch)
        rows.append(("change", stat_line(record.workspace)))
    if record.artifacts is not None and record.artifacts.files:
        rows.append(("artifacts", ", ".join(a.name for a in record.artifacts.files)))
    if record.trace_id:  # the job's trace, when its producer traced it (docs/tracing.md)
        rows.append(("trace", record.trace_id))
    if record.result:
        usage = record.result.usage
        rows.append(
            (
                "usage",
                f"in {usage.input_tokens} / out {usage.output_tokens} / cache read {usage.cache_read_tokens}"
                f" / cache write {usage.cache_creation_tokens} · ${usage.cost_usd:.6f}",
            )
        )
    error = record.error
    if error and error.kind == record.status:  # cancelled: the status says it; the message may say more
        if error.message != error.kind:
            rows.append(("reason", error.message))
    elif error:
        rows.append(("error", f"{error.kind}: {error.message}"))
    for key, value in rows:
        out.print(f"  {key:<9} {value}")
    if record.result and record.result.structured_output is not None:
        out.print_json(data=record.result.structured_output)
    elif (
        record.result and record.result.text and record.finished and not (error and record.result.text in error.message)
    ):
        out.print(record.result.text)  # (a failure's last words are already in its error)


def _why_waiting(client: Client, record: JobRecord) -> str | None:
    """Why an unfinished job is not running: its deferral (until when, why), or the jobs it waits for."""
    if record.status == "deferred":
        deferrals = [e for e in client.events(record.id) if e.type == "deferred"]
        if deferrals:
            data = deferrals[-1].data
            return f"until {data.get('ready_at', '?')}: {data.get('reason', '?')}"
        return f"until {record.ready_at.isoformat()}" if record.ready_at else None
    if record.status == "waiting" and record.spec.depends_on:
        return f"for {', '.join(record.spec.depends_on)} to succeed"
    return None


def _metadata(pairs: list[str]) -> dict[str, str]:
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise JobSpecError([("metadata", f"{pair!r} is not KEY=VALUE")])
        data[key] = value
    return data


@dataclass(frozen=True)
class SubmitOptions:
    """`claudeq submit`'s arguments and options, one field each (typer reads them as the command's parameters)."""

    prompt: Annotated[
        str | None, typer.Argument(help="The prompt; '-' reads stdin, '@file' reads a file.", show_default=False)
    ] = None
    model: Annotated[str | None, typer.Option(help="Model alias or id.")] = None
    system_prompt: Annotated[str | None, typer.Option(help="Replace the system prompt ('@file' reads a file).")] = None
    append_system_prompt: Annotated[
        str | None, typer.Option(help="Append to the system prompt ('@file' reads a file).")
    ] = None
    tools: Annotated[str | None, typer.Option(help="Tool profile, or a comma-separated list of tools.")] = None
    mcp_tool: Annotated[list[str] | None, typer.Option(help="Worker-registered MCP tool (repeatable).")] = None
    max_turns: Annotated[int | None, typer.Option(help="Maximum agent turns.")] = None
    max_budget_usd: Annotated[float | None, typer.Option(help="Budget cap in USD.")] = None
    output_schema: Annotated[str | None, typer.Option(help="JSON schema (JSON text or @file).")] = None
    conversation: Annotated[str | None, typer.Option(help="Continue (or start) this conversation.")] = None
    resume: Annotated[str | None, typer.Option(help="Resume this session id.")] = None
    fork: Annotated[bool, typer.Option(help="Branch the conversation/session instead of continuing it.")] = False
    account: Annotated[str | None, typer.Option(help="Pin the job to this account.")] = None
    queue: Annotated[str | None, typer.Option(help="Celery queue.")] = None
    priority: Annotated[int, typer.Option(help="0 (first) .. 9 (last).")] = 0
    tenant: Annotated[str | None, typer.Option(help="Who the job is for (CLAUDEQ_TENANTS_FILE).")] = None
    deadline_s: Annotated[float | None, typer.Option("--deadline", help="Hard deadline per attempt (s).")] = None
    max_attempts: Annotated[int | None, typer.Option(help="Attempts before giving up.")] = None
    cwd: Annotated[str | None, typer.Option(help="Working directory (under a workspace root).")] = None
    workspace: Annotated[
        str | None, typer.Option(help="A git repository: the job works in a worktree of its own (see claudeq diff).")
    ] = None
    ref: Annotated[str | None, typer.Option(help="With --workspace: what the worktree starts from (main).")] = None
    concurrency_key: Annotated[
        str | None, typer.Option(help="At most --concurrency-limit jobs of this key run at once.")
    ] = None
    concurrency_limit: Annotated[int | None, typer.Option(help="Jobs of the key at once (1).")] = None
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job.")] = None
    depends_on: Annotated[
        list[str] | None, typer.Option("--depends-on", help="A job that must succeed first (repeatable).")
    ] = None
    on_dependency_failure: Annotated[
        str | None, typer.Option(help="A dependency failed: fail (the default) or run.")
    ] = None
    webhook: Annotated[
        str | None, typer.Option(help="POST the job's end here, signed (on a host in CLAUDEQ_WEBHOOK_HOSTS).")
    ] = None
    webhook_event: Annotated[
        list[str] | None,
        typer.Option("--webhook-event", help="Also POST this event type as it happens (repeatable; needs --webhook)."),
    ] = None
    link: Annotated[
        str | None, typer.Option(help="TASK[@QUEUE] of your Celery app, sent the record when the job succeeds.")
    ] = None
    link_error: Annotated[
        str | None, typer.Option(help="TASK[@QUEUE] of your Celery app, sent the record when it fails or is cancelled.")
    ] = None
    metadata: Annotated[list[str] | None, typer.Option("--meta", help="KEY=VALUE (repeatable).")] = None
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run (progress on stderr) and print the answer.")] = (
        False
    )
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up waiting after this many s.")] = None
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from-file",
            help="Submit many jobs: a JSONL file ('-' = stdin), one JSON spec per line; the options above are "
            "defaults for every line. All or nothing: a refused line is reported by number and nothing is sent.",
        ),
    ] = None
    as_json: JsonOpt = False


@app.command()
@_guard
@options_command(SubmitOptions)
def submit(opts: SubmitOptions) -> None:
    """Submit a job. Prints its id (or, with --wait, streams its progress on stderr and prints its final record).
    With --from-file, many jobs."""
    if (opts.prompt is None) == (opts.from_file is None):
        raise JobSpecError([("prompt", "give a prompt or --from-file, not both" if opts.prompt else "missing")])
    fields = _spec_fields(opts)
    client = _client()
    if opts.from_file is not None:
        if opts.wait:
            raise JobSpecError([("--wait", "not available with --from-file")])
        submit_from_file(client, opts.from_file, fields, opts.as_json, err)
        return
    handle = client.submit(fields)
    if not opts.wait:
        if opts.as_json:
            print(json.dumps({"id": handle.id, "created": handle.created}))
        else:
            out.print(handle.id)
        return
    record = _wait_with_spinner(client, handle.id, opts.timeout, opts.as_json)
    _print_record(record, opts.as_json)
    if record.status != "succeeded":
        raise typer.Exit(EXIT_JOB_FAILED)


def _spec_fields(opts: SubmitOptions) -> dict[str, Any]:
    """The job spec's fields `submit`'s options give (files read, lists split); JobSpecError for a bad one."""
    fields: dict[str, Any] = {"priority": opts.priority, "fork": opts.fork}
    if opts.prompt is not None:
        fields["prompt"] = _read_text_arg(opts.prompt)
    optional: dict[str, Any] = {
        "model": opts.model,
        "system_prompt": _read_file_arg(opts.system_prompt, "system_prompt"),
        "append_system_prompt": _read_file_arg(opts.append_system_prompt, "append_system_prompt"),
        "max_turns": opts.max_turns,
        "max_budget_usd": opts.max_budget_usd,
        "conversation": opts.conversation,
        "resume": opts.resume,
        "account": opts.account,
        "queue": opts.queue,
        "tenant": opts.tenant,
        "deadline_s": opts.deadline_s,
        "max_attempts": opts.max_attempts,
        "cwd": opts.cwd,
        "idempotency_key": opts.idempotency_key,
        "concurrency_key": opts.concurrency_key,
        "concurrency_limit": opts.concurrency_limit,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    if opts.tools is not None:
        tools = opts.tools
        fields["tools"] = tools if "," not in tools and tools.islower() else [t for t in tools.split(",") if t]
    if opts.mcp_tool:
        fields["mcp_tools"] = opts.mcp_tool
    fields.update(_nested_fields(opts))
    if opts.metadata:
        fields["metadata"] = _metadata(opts.metadata)
    if opts.output_schema is not None:
        try:
            fields["output_schema"] = json.loads(_read_text_arg(opts.output_schema, "output_schema"))
        except json.JSONDecodeError as exc:
            raise JobSpecError([("output_schema", f"not JSON: {exc}")]) from None
    return fields


def _nested_fields(opts: SubmitOptions) -> dict[str, Any]:
    """The spec's objects `submit`'s flat options spell: workspace, dependencies, webhook, Celery callbacks."""
    fields: dict[str, Any] = {}
    if opts.workspace is not None:
        fields["workspace"] = {"repo": opts.workspace, **({"ref": opts.ref} if opts.ref else {})}
    elif opts.ref is not None:
        raise JobSpecError([("--ref", "needs --workspace REPO")])
    if opts.depends_on:
        fields["depends_on"] = opts.depends_on
    if opts.on_dependency_failure is not None:
        fields["on_dependency_failure"] = opts.on_dependency_failure
    if opts.webhook_event and opts.webhook is None:
        raise JobSpecError([("webhook", "--webhook-event needs --webhook URL")])
    if opts.webhook is not None:
        fields["webhook"] = {"url": opts.webhook, **({"events": opts.webhook_event} if opts.webhook_event else {})}
    for name, callback in (("link", opts.link), ("link_error", opts.link_error)):
        if callback is not None:
            task, _, callback_queue = callback.partition("@")
            fields[name] = {"task": task, **({"queue": callback_queue} if callback_queue else {})}
    return fields


def _stream(
    client: Client, job_id: str, timeout: float | None = None, to: Console | None = None, every: bool = False
) -> JobRecord:
    """Print the job's progress (assistant text, tool calls, retries, rate-limit waits, …; with `every`, each
    event) as it happens (on `to`, default stderr), until it finishes; JobTimeout after `timeout` s. Says so (on
    stderr) when the job waits with no live worker for its queue."""
    to = to or err
    whole = not to.is_terminal
    queue = client.get(job_id).spec.queue or client.settings.queue
    deadline = None if timeout is None else time.monotonic() + timeout
    warned = False
    # claudeq/follow.py's loop; quiet for NO_WORKER_NOTICE_S, a queued job's workers are looked for.
    for item in blocking(follow(client.store, job_id, keepalive_s=NO_WORKER_NOTICE_S, until=deadline)):
        if isinstance(item, Ended):
            if item.status != "gone":
                client.until_replicated(job_id)  # as Client.wait: an end the replicas hold (docs/failover.md)
            return client.get(job_id)
        if isinstance(item, KeepAlive):
            if item.status == "queued":
                idle = not client.live_workers(queue)
                if idle and not warned:
                    err.print(
                        f"no live worker consumes queue {queue!r}: the job waits until one starts "
                        "(`claudeq-worker`; see README, real workers)",
                        highlight=False,
                    )
                warned = idle
            continue
        if item[1].type in TERMINAL:
            client.until_replicated(job_id)
        text = line(item[1], whole, every)
        if text is not None:
            to.print(text)
    raise JobTimeout(job_id, timeout or 0)


def _wait_with_spinner(client: Client, job_id: str, timeout: float | None, as_json: bool) -> JobRecord:
    """With --json: wait quietly (stdout is the record alone); else stream the progress on stderr while waiting."""
    if as_json:
        return client.wait(job_id, timeout=timeout)
    return _stream(client, job_id, timeout)


@app.command()
@_guard
def status(job_id: str, as_json: JsonOpt = False) -> None:
    """Show a job's record (and why it waits, when it does)."""
    client = _client()
    record = client.get(job_id)
    _print_record(record, as_json, None if as_json else _why_waiting(client, record))


@app.command("wait")
@_guard
def wait_cmd(
    job_id: str,
    timeout: Annotated[float | None, typer.Option(help="Give up waiting after this many s.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Wait for a job to finish; exit 3 if it did not succeed, 4 on timeout."""
    record = _wait_with_spinner(_client(), job_id, timeout, as_json)
    _print_record(record, as_json)
    if record.status != "succeeded":
        raise typer.Exit(EXIT_JOB_FAILED)


@app.command()
@_guard
def cancel(job_id: str, as_json: JsonOpt = False) -> None:
    """Cancel a job: at once when waiting; a running job is stopped within about a second."""
    result = _client().cancel(job_id)
    message = {
        "cancelled": "cancelled",
        "running": "cancel requested; the worker stops the run",
    }.get(result, f"already {result}")
    if as_json:
        print(json.dumps({"id": job_id, "result": result}))
    else:
        out.print(f"{job_id}: {message}")


@app.command()
@_guard
def approve(
    job_id: str,
    deny: Annotated[
        bool, typer.Option("--deny", help="Deny the tool use (the model is told, with the reason).")
    ] = False,
    reason: Annotated[str | None, typer.Option(help="Why (recorded; the model gets it with a denial).")] = None,
    request: Annotated[str | None, typer.Option(help="The request id (default: the job's pending one).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve (or --deny) the tool use a job waits on (docs/jobs.md#tool-approval); as the operator."""
    answered = _client().approve(job_id, not deny, reason, request_id=request)
    if as_json:
        print(json.dumps({"id": job_id, "approval": answered.model_dump(mode="json")}))
        return
    verb = "denied" if deny else "approved"
    out.print(f"{job_id}: {verb} {answered.request_id} ({answered.tool})", highlight=False)


@app.command()
@_guard
def approvals(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The jobs waiting for an approval now, with the tool use each one waits on."""
    records = _client().approvals(tenant)
    if as_json:
        print(json.dumps({"approvals": [r.public() for r in records]}))
        return
    rows = []
    for record in records:
        pending = record.approval
        assert pending is not None
        asked = pending.requested_at.strftime("%Y-%m-%d %H:%M:%S")
        rows.append([pending.request_id, pending.tool, json.dumps(pending.input), asked, record.spec.tenant, record.id])
    print_table(out, ["request", "tool", "input", "asked", "tenant", "id"], rows)


@app.command("list")
@_guard
def list_cmd(
    status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 20,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs (read from its own index).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent jobs, newest first."""
    if status is not None and status not in JOB_STATUSES:
        raise JobSpecError([("status", f"unknown status {status!r}; one of {', '.join(JOB_STATUSES)}")])
    items = _client().list(status=status, limit=limit, tenant=tenant)
    if as_json:
        print(
            json.dumps(
                [i.public() if isinstance(i, JobRecord) else {"id": i.job_id, "unreadable": i.detail} for i in items]
            )
        )
        return
    rows: list[list[str | Text]] = []
    for item in items:
        if isinstance(item, RecordUnreadable):
            rows.append([Text("unreadable", "red"), "", "", "", item.detail, item.job_id])
            continue
        rows.append(
            [
                Text(item.shown_status, _STATUS_STYLE.get(item.shown_status, "cyan")),
                item.account or "-",
                str(len(item.attempts)),
                item.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                item.spec.prompt,
                item.id,
            ]
        )
    print_table(out, ("status", "account", "attempts", "created", "prompt", "id"), rows)


@app.command()
@_guard
def events(
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following until the job ends.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a job's events, one line each (one JSON object per line with --json); the same lines as it happens
    with --follow."""
    client = _client()
    client.get(job_id)
    if follow and not as_json:
        _stream(client, job_id, to=out, every=True)
        return
    for event in client.events(job_id, follow=follow):
        if as_json:
            print(event.model_dump_json(), flush=True)
        else:
            out.print(line(event, whole=not out.is_terminal, every=True))


@app.command()
@_guard
def transcript(
    job_id: str,
    raw: Annotated[bool, typer.Option("--raw", help="Every entry as stored (one JSON object a line).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the conversation of a job's sessions (from Redis or the transcript archive): per session its id, then
    what the user and the assistant said, its thinking, each tool use and result. --raw: the entries themselves;
    --json: the entries with their session id."""
    sessions = _client().transcript(job_id)
    if not sessions and not as_json:
        err.print(f"{job_id}: no transcript kept (its retention ended, or it was dropped at success)")
    for session_id, entries in sessions:
        if as_json:
            for entry in entries:
                print(json.dumps({"session_id": session_id, **entry}), flush=True)
            continue
        out.print(f"session {session_id} ({len(entries)} entries)")
        if raw:
            for entry in entries:
                out.print(json.dumps(entry, ensure_ascii=False))
            continue
        for block in conversation(entries):
            out.print(block_line(block))


ScheduleTenantOpt = Annotated[str, typer.Option("--tenant", help="Whose schedule (a tenant's names are its own).")]


@webhooks_app.command("dead")
@_guard
def webhooks_dead(
    limit: Annotated[int, typer.Option(help="At most this many, most recent first.", min=1)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Jobs with a notification given up on: what failed, how often, the last error (docs/notifications.md)."""
    rows = [r for r in _client().dead_notifications(limit) if isinstance(r, JobRecord)]
    if as_json:
        print(
            json.dumps(
                [{"id": r.id, "notifications": [n.model_dump(mode="json") for n in r.notifications]} for r in rows]
            )
        )
        return
    print_table(
        out,
        ("job", "tenant", "target", "state", "tries", "last answer", "last error"),
        [
            [r.id, r.spec.tenant, n.target, n.state, str(n.attempts), str(n.status_code or "-"), n.error or ""]
            for r in rows
            for n in r.notifications
        ],
    )


@webhooks_app.command("retry")
@_guard
def webhooks_retry(job_id: str, as_json: JsonOpt = False) -> None:
    """Try a job's dead notifications again, from the first try on, now."""
    again = _client().retry_notifications(job_id)
    if as_json:
        print(json.dumps({"id": job_id, "retried": again}))
        return
    out.print(f"{job_id}: {again} notification(s) tried again" if again else f"{job_id}: no notification was dead")


@dataclass(frozen=True)
class ScheduleAddOptions:
    """`claudeq schedule add`'s arguments and options, one field each."""

    name: str
    prompt: Annotated[str, typer.Argument(help="The prompt (`-` reads stdin, `@file` a file).")]
    cron: Annotated[str | None, typer.Option(help="A cron expression, e.g. '0 2 * * *'.")] = None
    every: Annotated[int | None, typer.Option(help="Or: every this many seconds.", min=1)] = None
    tz: Annotated[str, typer.Option(help="The time zone the cron expression is read in.")] = "UTC"
    on_missed: Annotated[str, typer.Option(help="A tick no worker reached in time: skip, or run_once.")] = "skip"
    tenant: ScheduleTenantOpt = DEFAULT_TENANT
    spec: Annotated[
        str | None, typer.Option(help="More spec fields as a JSON object (JSON text or @file): tools, cwd, …")
    ] = None
    replace: Annotated[bool, typer.Option("--replace", help="Replace a schedule of that name.")] = False
    as_json: JsonOpt = False


@schedule_app.command("add")
@_guard
@options_command(ScheduleAddOptions)
def schedule_add(opts: ScheduleAddOptions) -> None:
    """Add a schedule: the fleet submits PROMPT (and --spec's fields) on every tick, exactly once per tick."""
    fields: dict[str, Any] = {}
    if opts.spec is not None:
        try:
            fields = json.loads(_read_text_arg(opts.spec, "spec"))
        except ValueError as exc:
            raise JobSpecError([("spec", f"not JSON: {exc}")]) from None
        if not isinstance(fields, dict):
            raise JobSpecError([("spec", "must be a JSON object of spec fields")])
    fields.update(prompt=_read_text_arg(opts.prompt), tenant=opts.tenant)
    try:
        schedule = _client().add_schedule(
            opts.name,
            fields,
            cron=opts.cron,
            every_s=opts.every,
            tz=opts.tz,
            on_missed=opts.on_missed,
            replace=opts.replace,
        )
    except JobSpecError as exc:
        if opts.as_json:  # scripts read the spec's field names
            raise
        raise JobSpecError([(_flag(f), _flag(r)) for f, r in exc.errors]) from None  # as this command spells them
    [info] = [i for i in _client().schedules(opts.tenant) if i.schedule.name == opts.name]
    if opts.as_json:
        print(info.model_dump_json())
    else:
        rule_text = f"cron {schedule.cron!r} ({schedule.tz})" if schedule.cron else f"every {schedule.every_s} s"
        out.print(f"schedule {opts.name}: {rule_text}; next tick {info.next_tick}")


def _flag(text: str) -> str:
    """A schedule rule's field names as `schedule add`'s flags."""
    return re.sub(r"\bcron\b", "--cron", re.sub(r"\bevery_s\b", "--every", text))


@schedule_app.command("list")
@_guard
def schedule_list(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's schedules.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Schedules with their next tick and what they fired."""
    infos = _client().schedules(tenant)
    if as_json:
        print(json.dumps([json.loads(i.model_dump_json()) for i in infos]))
        return
    rows = []
    for info in infos:
        s = info.schedule
        rule = f"{s.cron} ({s.tz})" if s.cron else f"every {s.every_s} s"
        nxt = "paused" if s.paused else (info.next_tick.strftime("%Y-%m-%d %H:%M:%S") if info.next_tick else "-")
        rows.append(
            [
                s.name,
                s.tenant,
                rule,
                nxt,
                str(info.fired),
                str(info.missed),
                info.last_job_id or "-",
                info.last_error or "-",
            ]
        )
    print_table(out, ("name", "tenant", "rule", "next tick", "fired", "missed", "last job", "last error"), rows)


def _schedule_action(action: str, name: str, tenant: str, as_json: bool) -> None:
    client = _client()
    getattr(client, f"{action}_schedule")(name, tenant)
    if as_json:
        print(json.dumps({"name": name, "tenant": tenant, "done": action}))
    else:
        out.print(f"schedule {name}: {action.removesuffix('e')}ed")


@schedule_app.command("pause")
@_guard
def schedule_pause(name: str, tenant: ScheduleTenantOpt = DEFAULT_TENANT, as_json: JsonOpt = False) -> None:
    """Stop firing a schedule until it is resumed."""
    _schedule_action("pause", name, tenant, as_json)


@schedule_app.command("resume")
@_guard
def schedule_resume(name: str, tenant: ScheduleTenantOpt = DEFAULT_TENANT, as_json: JsonOpt = False) -> None:
    """Fire a paused schedule again, from its next tick after now."""
    _schedule_action("resume", name, tenant, as_json)


@schedule_app.command("remove")
@_guard
def schedule_remove(name: str, tenant: ScheduleTenantOpt = DEFAULT_TENANT, as_json: JsonOpt = False) -> None:
    """Delete a schedule (the jobs it fired stay)."""
    _schedule_action("remove", name, tenant, as_json)


@app.command()
@_guard
def top(
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.2)] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The fleet, live: accounts, queues, workers, runs in flight, recent finishes, jobs/s. `q` quits. With --json,
    one frame's figures."""
    from .top import collect, run

    if as_json:
        print(json.dumps(collect(_client()).public()))
        return

    try:
        run(_client(), interval=interval, once=once, console=out)
    except KeyboardInterrupt:
        pass


@app.command("tenants")
@_guard
def tenants_cmd(as_json: JsonOpt = False) -> None:
    """Tenants: runs in flight (vs max_concurrency), jobs waiting, spend this hour and day (UTC) vs the caps."""
    from claudeq.tenants import TenantStore

    settings = _settings()
    store = Client(settings).store
    slots = sum(a.max_concurrency for a in settings.accounts.accounts) if settings.tenants.reserve_share else None
    names = [a.name for a in settings.accounts.accounts]
    usage = TenantStore(store.redis, store.keys, settings.tenants, accounts=names).usage(slots=slots)
    if as_json:
        print(json.dumps({"tenants": [u.public() for u in usage]}))
        return
    rows = []
    for u in usage:
        cap = u.cap
        rows.append(
            [
                u.name,
                f"{u.in_flight}/{cap}"
                + (f" ({_share_note(u.balance)})" if cap is not None and cap == u.share_cap else "")
                if cap is not None
                else str(u.in_flight),
                str(u.waiting),
                f"{u.weight:g}",
                _spend(u.spend.hour, u.spend.cap_hour),
                _spend(u.spend.day, u.spend.cap_day),
                u.on_budget,
            ]
        )
    headers = ("tenant", "in flight", "waiting", "weight", "spend / cap per hour", "per day", "on budget")
    print_table(out, headers, rows)


def _share_note(balance: float | None) -> str:
    """The share cap's note: its catch-up balance (slot-seconds) when it moves the cap
    (docs/architecture.md#fair-share)."""
    from claudeq.tenants import BALANCE_DEADBAND

    if balance is not None and balance > BALANCE_DEADBAND:
        return f"share, owed {balance:.0f}"
    if balance is not None and balance < -BALANCE_DEADBAND:
        return f"share, owes {-balance:.0f}"
    return "share"


def _spend(spent: float, cap: float | None) -> str:
    if cap is None:
        return f"${spent:.4f}"
    return f"${spent:.4f} / ${cap:.4f} ({spent / cap:.0%})"


@app.command("mcp")
def mcp_cmd(
    http: Annotated[
        str | None, typer.Option("--http", metavar="HOST:PORT", help="Serve streamable HTTP (path /mcp), not stdio.")
    ] = None,
) -> None:
    """Serve the fleet as an MCP server (stdio by default): submit_job, get_job, list_jobs, cancel_job, wait_job,
    accounts. `claude mcp add claudeq -- claudeq mcp`."""
    try:
        from .mcp_server import parse_address, serve  # imports `mcp`: only for this command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq mcp", exc)

    if http is not None:
        try:
            parse_address(http)
        except ValueError as exc:
            _fail(EXIT_BAD_INPUT, f"--http: {exc}")
    serve(http, _settings())


@app.command("web")
def web_cmd(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8780,
) -> None:
    """Serve the run view in a browser: jobs, each run's events live, transcripts, accounts and tenants
    (docs/web.md). Every page needs a token: tenants', CLAUDEQ_WEB_TOKEN, or the one it prints at start."""
    try:
        from .web import serve  # imports jinja2, fastapi, starlette, uvicorn: only for this command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq web", exc)
    serve(host, port, _settings())


@app.command("api")
def api_cmd(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8781,
) -> None:
    """Serve the HTTP API alone, /api/v1 described at /api/v1/openapi.json (docs/http-api.md); `claudeq web` serves
    it too. Every call needs a token: tenants', CLAUDEQ_WEB_TOKEN, or the one it prints at start."""
    try:
        from .api import serve  # imports fastapi, starlette, uvicorn: only for this command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq api", exc)
    serve(host, port, _settings())


@config_app.command("check")
def config_check(as_json: JsonOpt = False) -> None:
    """Validate settings, accounts and the tenants file, check every token is present, Redis answers and keeps
    jobs (AOF on, noeviction: warnings with the fix). Secrets are never shown. The Claude CLI and the tools module
    are checked by `claudeq-worker` at start."""
    problems: list[str] = []
    warnings: list[str] = []
    try:
        settings = load_settings()
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json)
    report: dict[str, Any] = {"redis_url": settings.redacted_redis_url()}
    unreachable = _check_services(settings, report, problems, warnings)
    try:
        pool = settings.accounts
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"accounts: {exc}", as_json)
    if not pool.accounts:
        problems.append("no accounts: set CLAUDEQ_ACCOUNTS_FILE (see accounts.example.toml) or a token in the env")
    report["accounts"] = [_account_entry(acct, problems) for acct in pool.accounts]
    report["tenants"], tenant_problems, tenant_warnings = tenants_report(settings, [a.name for a in pool.accounts])
    problems += tenant_problems
    warnings += tenant_warnings
    report["queues"] = settings.queues
    from ..worker.run.sandbox import isolation  # no SDK needed

    report["isolation"], isolation_problem = isolation(settings.policy)
    if isolation_problem is not None:
        problems.append(isolation_problem)
    report["problems"] = problems
    report["warnings"] = warnings
    if as_json:
        print(json.dumps(report))
    else:
        _print_config_report(report)
    if unreachable and len(problems) == 1:
        raise typer.Exit(EXIT_ERROR)  # the configuration is fine; the service is not there
    raise typer.Exit(EXIT_BAD_INPUT if problems else EXIT_OK)


def _check_services(settings: Settings, report: dict[str, Any], problems: list[str], warnings: list[str]) -> bool:
    """Redis (and its configuration) and the archive, into `report`; True when Redis does not answer."""
    unreachable = False
    try:
        client = connections.sync_client(settings, socket_connect_timeout=2, socket_timeout=5)
        client.ping()
        report["redis"] = "ok"
        report["redis_config"], found = redis_warnings(client)
        warnings += found
    except redis.RedisError as exc:
        report["redis"] = f"unreachable: {exc.__class__.__name__}"
        problems.append(f"Redis at {settings.redacted_redis_url()} does not answer (set CLAUDEQ_REDIS_URL)")
        unreachable = True
    if settings.archive_url:
        from claudeq.archive import open_archive

        try:
            open_archive(settings.archive_url)
            report["archive"] = "ok"
        except ConfigError as exc:
            report["archive"] = "unreachable"
            problems.append(str(exc))
    return unreachable


def _account_entry(acct: AccountConfig, problems: list[str]) -> dict[str, Any]:
    """An account as `config check` reports it: whether its token is there, never the token."""
    entry: dict[str, Any] = {"name": acct.name, "kind": acct.kind, "max_concurrency": acct.max_concurrency}
    try:
        acct.read_token()
        entry["token"] = "present"
    except ConfigError as exc:
        entry["token"] = "missing"
        problems.append(str(exc))
    return entry


def _print_config_report(report: dict[str, Any]) -> None:
    """`config check`'s report for a person: what was checked on stdout, warnings and problems on stderr."""
    out.print(f"redis      {report['redis_url']}: {report['redis']}")
    if "archive" in report:
        out.print(f"archive    {report['archive']}")
    out.print(f"isolation  {report['isolation']}", highlight=False)
    for entry in report["accounts"]:
        out.print(
            f"account    {entry['name']} ({entry['kind']}, x{entry['max_concurrency']}): token {entry['token']}",
            highlight=False,
        )
    if report["tenants"]["file"]:
        out.print(f"tenants    {report['tenants']['file']}: {', '.join(report['tenants']['tenants']) or '-'}")
    warnings, problems = report["warnings"], report["problems"]
    for warning in warnings:
        err.print(styled(("warning:", "yellow"), f" {warning}"))
    for problem in problems:
        err.print(styled(("problem:", "red"), f" {problem}"))
    if not problems:
        out.print(styled(("configuration ok", "green"), f" ({len(warnings)} warning(s))" if warnings else ""))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
