"""`claudeq`: submit, follow and operate jobs from the shell. Every command has `--json` for scripts.

Exit codes: 0 ok, 1 runtime error (Redis unreachable, …), 2 bad input (the spec was refused: nothing written),
3 the job finished but did not succeed, 4 waiting timed out (the job goes on), 5 no such job.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import typing
from pathlib import Path
from typing import Annotated, Any, NoReturn

import redis
import typer
from rich.console import Console
from rich.table import Table

from claudeq import connections
from claudeq.config.settings import Settings, load_settings
from claudeq.config.tenants import DEFAULT_TENANT
from claudeq.errors import ClaudeqError, ConfigError, JobNotFound, JobSpecError, JobTimeout, RecordUnreadable
from claudeq.models import TERMINAL, Event, JobRecord, JobStatus
from claudeq.producer.cli_accounts import accounts_app
from claudeq.producer.cli_batch import submit_from_file
from claudeq.producer.cli_conversation import conversation_app
from claudeq.producer.cli_workspaces import artifacts, diff, stat_line, workspaces_app
from claudeq.producer.client import Client
from claudeq.producer.extras import exit_missing
from claudeq.schedules import ScheduleNotFound

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

out = Console()
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

#: The exporter's default port (workers use 9808, .env.example).
EXPORTER_PORT = 9809


@app.command("exporter")
def exporter(
    port: Annotated[
        int, typer.Option("--port", envvar="CLAUDEQ_EXPORTER_PORT", help="Port of /metrics.")
    ] = EXPORTER_PORT,
    addr: Annotated[str, typer.Option("--addr", envvar="CLAUDEQ_EXPORTER_ADDR", help="Address to bind.")] = "0.0.0.0",
) -> None:
    """Serve cluster-wide gauges (queues, jobs, accounts, workers) read from Redis at scrape time."""
    # Fleet code (prometheus_client): loaded when the exporter runs, never by a producer importing the CLI.
    try:
        from claudeq.worker.metrics.exporter import exporter_command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq exporter", exc)

    exporter_command(port, addr)


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
        err.print(f"[red]error:[/red] {message}", highlight=False)
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


def _print_record(record: JobRecord, as_json: bool) -> None:
    if as_json:
        print(json.dumps(record.public()))
        return
    colour = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(record.status, "cyan")
    out.print(f"[bold]{record.id}[/bold]  [{colour}]{record.status}[/{colour}]", highlight=False)
    rows: list[tuple[str, str]] = [
        ("account", record.account or "-"),
        ("session", record.session_id or "-"),
        ("attempts", ", ".join(f"{a.number}:{a.account or '-'}:{a.outcome or 'running'}" for a in record.attempts)),
        ("created", record.created_at.isoformat()),
    ]
    if record.ready_at:
        rows.append(("ready at", record.ready_at.isoformat()))
    if record.status == "deferred" and record.wait_reason:
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
    if record.error:
        rows.append(("error", f"{record.error.kind}: {record.error.message}"))
    for key, value in rows:
        out.print(f"  {key:<9} {value}", highlight=False)
    if record.result and record.result.structured_output is not None:
        out.print_json(data=record.result.structured_output)
    elif record.result and record.result.text:
        out.print(record.result.text, highlight=False, markup=False)


def _metadata(pairs: list[str]) -> dict[str, str]:
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise JobSpecError([("metadata", f"{pair!r} is not KEY=VALUE")])
        data[key] = value
    return data


@app.command()
@_guard
def submit(
    prompt: Annotated[
        str | None, typer.Argument(help="The prompt; '-' reads stdin, '@file' reads a file.", show_default=False)
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model alias or id.")] = None,
    system_prompt: Annotated[str | None, typer.Option(help="Replace the system prompt ('@file' reads a file).")] = None,
    append_system_prompt: Annotated[
        str | None, typer.Option(help="Append to the system prompt ('@file' reads a file).")
    ] = None,
    tools: Annotated[str | None, typer.Option(help="Tool profile, or a comma-separated list of tools.")] = None,
    mcp_tool: Annotated[list[str] | None, typer.Option(help="Worker-registered MCP tool (repeatable).")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Maximum agent turns.")] = None,
    max_budget_usd: Annotated[float | None, typer.Option(help="Budget cap in USD.")] = None,
    output_schema: Annotated[str | None, typer.Option(help="JSON schema (JSON text or @file).")] = None,
    conversation: Annotated[str | None, typer.Option(help="Continue (or start) this conversation.")] = None,
    resume: Annotated[str | None, typer.Option(help="Resume this session id.")] = None,
    fork: Annotated[bool, typer.Option(help="Branch the conversation/session instead of continuing it.")] = False,
    account: Annotated[str | None, typer.Option(help="Pin the job to this account.")] = None,
    queue: Annotated[str | None, typer.Option(help="Celery queue.")] = None,
    priority: Annotated[int, typer.Option(help="0 (first) .. 9 (last).")] = 0,
    tenant: Annotated[str | None, typer.Option(help="Who the job is for (CLAUDEQ_TENANTS_FILE).")] = None,
    deadline_s: Annotated[float | None, typer.Option("--deadline", help="Hard deadline per attempt (s).")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts before giving up.")] = None,
    cwd: Annotated[str | None, typer.Option(help="Working directory (under a workspace root).")] = None,
    workspace: Annotated[
        str | None, typer.Option(help="A git repository: the job works in a worktree of its own (see claudeq diff).")
    ] = None,
    ref: Annotated[str | None, typer.Option(help="With --workspace: what the worktree starts from (main).")] = None,
    concurrency_key: Annotated[
        str | None, typer.Option(help="At most --concurrency-limit jobs of this key run at once.")
    ] = None,
    concurrency_limit: Annotated[int | None, typer.Option(help="Jobs of the key at once (1).")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same job.")] = None,
    depends_on: Annotated[
        list[str] | None, typer.Option("--depends-on", help="A job that must succeed first (repeatable).")
    ] = None,
    on_dependency_failure: Annotated[
        str | None, typer.Option(help="A dependency failed: fail (the default) or run.")
    ] = None,
    webhook: Annotated[
        str | None, typer.Option(help="POST the job's end here, signed (on a host in CLAUDEQ_WEBHOOK_HOSTS).")
    ] = None,
    webhook_event: Annotated[
        list[str] | None,
        typer.Option("--webhook-event", help="Also POST this event type as it happens (repeatable; needs --webhook)."),
    ] = None,
    link: Annotated[
        str | None, typer.Option(help="TASK[@QUEUE] of your Celery app, sent the record when the job succeeds.")
    ] = None,
    link_error: Annotated[
        str | None, typer.Option(help="TASK[@QUEUE] of your Celery app, sent the record when it fails or is cancelled.")
    ] = None,
    metadata: Annotated[list[str] | None, typer.Option("--meta", help="KEY=VALUE (repeatable).")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the run (progress on stderr) and print the answer.")
    ] = False,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up waiting after this many s.")] = None,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from-file",
            help="Submit many jobs: a JSONL file ('-' = stdin), one JSON spec per line; the options above are "
            "defaults for every line. All or nothing: a refused line is reported by number and nothing is sent.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job. Prints its id (or, with --wait, streams its progress on stderr and prints its final record).
    With --from-file, many jobs."""
    if (prompt is None) == (from_file is None):
        raise JobSpecError([("prompt", "give a prompt or --from-file, not both" if prompt else "missing")])
    fields: dict[str, Any] = {"priority": priority, "fork": fork}
    if prompt is not None:
        fields["prompt"] = _read_text_arg(prompt)
    optional: dict[str, Any] = {
        "model": model,
        "system_prompt": _read_file_arg(system_prompt, "system_prompt"),
        "append_system_prompt": _read_file_arg(append_system_prompt, "append_system_prompt"),
        "max_turns": max_turns,
        "max_budget_usd": max_budget_usd,
        "conversation": conversation,
        "resume": resume,
        "account": account,
        "queue": queue,
        "tenant": tenant,
        "deadline_s": deadline_s,
        "max_attempts": max_attempts,
        "cwd": cwd,
        "idempotency_key": idempotency_key,
        "concurrency_key": concurrency_key,
        "concurrency_limit": concurrency_limit,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    if tools is not None:
        fields["tools"] = tools if "," not in tools and tools.islower() else [t for t in tools.split(",") if t]
    if mcp_tool:
        fields["mcp_tools"] = mcp_tool
    if workspace is not None:
        fields["workspace"] = {"repo": workspace, **({"ref": ref} if ref else {})}
    elif ref is not None:
        raise JobSpecError([("--ref", "needs --workspace REPO")])
    if depends_on:
        fields["depends_on"] = depends_on
    if on_dependency_failure is not None:
        fields["on_dependency_failure"] = on_dependency_failure
    if webhook_event and webhook is None:
        raise JobSpecError([("webhook", "--webhook-event needs --webhook URL")])
    if webhook is not None:
        fields["webhook"] = {"url": webhook, **({"events": webhook_event} if webhook_event else {})}
    for name, callback in (("link", link), ("link_error", link_error)):
        if callback is not None:
            task, _, callback_queue = callback.partition("@")
            fields[name] = {"task": task, **({"queue": callback_queue} if callback_queue else {})}
    if metadata:
        fields["metadata"] = _metadata(metadata)
    if output_schema is not None:
        try:
            fields["output_schema"] = json.loads(_read_text_arg(output_schema, "output_schema"))
        except json.JSONDecodeError as exc:
            raise JobSpecError([("output_schema", f"not JSON: {exc}")]) from None
    client = _client()
    if from_file is not None:
        if wait:
            raise JobSpecError([("--wait", "not available with --from-file")])
        submit_from_file(client, from_file, fields, as_json, err)
        return
    handle = client.submit(fields)
    if not wait:
        if as_json:
            print(json.dumps({"id": handle.id, "created": handle.created}))
        else:
            out.print(handle.id, highlight=False)
        return
    record = _wait_with_spinner(client, handle.id, timeout, as_json)
    _print_record(record, as_json)
    if record.status != "succeeded":
        raise typer.Exit(EXIT_JOB_FAILED)


def _stream(client: Client, job_id: str, timeout: float | None = None, to: Console | None = None) -> JobRecord:
    """Print the job's progress (assistant text, tool calls, retries, rate-limit waits, …) as it happens (on `to`,
    default stderr), until it finishes; JobTimeout after `timeout` s. Says so (on stderr) when the job waits with
    no live worker for its queue."""
    to = to or err
    from claudeq.producer.progress import line

    store = client.store
    record = client.get(job_id)
    queue = record.spec.queue or client.settings.queue
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    after = "0-0"
    next_worker_check = started + NO_WORKER_NOTICE_S
    warned = False
    while True:
        wait_ms = 500 if deadline is None else max(1, min(500, int((deadline - time.monotonic()) * 1000)))
        store.announce_follow(job_id)  # the worker running it stores its events at once while we follow
        for entry_id, event in store.read_events(job_id, after, block_ms=wait_ms):
            after = entry_id
            text = line(event)
            if text is not None:
                to.print(text, highlight=False, markup=False)
        status = store.status(job_id)
        if status is None or status in TERMINAL:
            if status is not None:
                client.until_replicated(job_id)  # as Client.wait: an end the replicas hold (docs/failover.md)
            for _, event in store.read_events(job_id, after):
                text = line(event)
                if text is not None:
                    to.print(text, highlight=False, markup=False)
            return client.get(job_id)
        now = time.monotonic()
        if status == "queued" and now >= next_worker_check:
            next_worker_check = now + NO_WORKER_NOTICE_S
            if not client.live_workers(queue):
                if not warned:
                    err.print(
                        f"no live worker consumes queue {queue!r}: the job waits until one starts "
                        "(`claudeq-worker`; see README, real workers)",
                        highlight=False,
                    )
                warned = True
            else:
                warned = False
        if deadline is not None and now >= deadline:
            raise JobTimeout(job_id, timeout or 0)


def _wait_with_spinner(client: Client, job_id: str, timeout: float | None, as_json: bool) -> JobRecord:
    """With --json: wait quietly (stdout is the record alone); else stream the progress on stderr while waiting."""
    if as_json:
        return client.wait(job_id, timeout=timeout)
    return _stream(client, job_id, timeout)


@app.command()
@_guard
def status(job_id: str, as_json: JsonOpt = False) -> None:
    """Show a job's record."""
    _print_record(_client().get(job_id), as_json)


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
        out.print(f"{job_id}: {message}", highlight=False)


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
    table = Table("status", "account", "attempts", "created", "prompt")
    table.add_column("id", no_wrap=True)
    for item in items:
        if isinstance(item, RecordUnreadable):
            table.add_row("[red]unreadable[/red]", "", "", "", item.detail[:40], item.job_id)
            continue
        table.add_row(
            item.status,
            item.account or "-",
            str(len(item.attempts)),
            item.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            item.spec.prompt[:40].replace("\n", " "),
            item.id,
        )
    out.print(table)


def _event_line(event: Event) -> str:
    attempt = f"#{event.attempt} " if event.attempt else ""
    data = " ".join(f"{k}={json.dumps(v)[:120]}" for k, v in event.data.items())
    return f"{event.at.strftime('%H:%M:%S.%f')[:-3]} {attempt}{event.type} {data}"


@app.command()
@_guard
def events(
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following until the job ends.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a job's events (one JSON object per line with --json)."""
    client = _client()
    client.get(job_id)
    if follow and not as_json:
        _stream(client, job_id, to=out)  # the same progress lines as `submit --wait`
        return
    for event in client.events(job_id, follow=follow):
        if as_json:
            print(event.model_dump_json(), flush=True)
        else:
            out.print(_event_line(event), highlight=False, markup=False)


@app.command()
@_guard
def transcript(job_id: str, as_json: JsonOpt = False) -> None:
    """Print the transcripts of a job's sessions (from Redis or the transcript archive): per session its id, then
    one line per entry (the entry's JSON with --json)."""
    sessions = _client().transcript(job_id)
    if not sessions and not as_json:
        err.print(f"{job_id}: no transcript kept (its retention ended, or it was dropped at success)")
    for session_id, entries in sessions:
        if not as_json:
            out.print(f"session {session_id} ({len(entries)} entries)", highlight=False, markup=False)
        for entry in entries:
            if as_json:
                print(json.dumps({"session_id": session_id, **entry}), flush=True)
            else:
                out.print(_entry_line(entry), highlight=False, markup=False)


def _entry_line(entry: dict[str, Any]) -> str:
    """One transcript entry as a person reads it: its type, then its message's text or its tool use, cut short."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                parts.append(f"[{block.get('name')}] {json.dumps(block.get('input'))[:200]}")
            elif block.get("type") == "tool_result":
                parts.append(f"[result] {str(block.get('content'))[:200]}")
    kind = str(entry.get("type", "?"))
    return f"{kind}: {' '.join(parts)[:400]}".replace("\n", " ") if parts else kind


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
    table = Table("job", "tenant", "target", "state", "tries", "last answer", "last error")
    for r in rows:
        for n in r.notifications:
            table.add_row(
                r.id, r.spec.tenant, n.target, n.state, str(n.attempts), str(n.status_code or "-"), n.error or ""
            )
    out.print(table)


@webhooks_app.command("retry")
@_guard
def webhooks_retry(job_id: str, as_json: JsonOpt = False) -> None:
    """Try a job's dead notifications again, from the first try on, now."""
    again = _client().retry_notifications(job_id)
    if as_json:
        print(json.dumps({"id": job_id, "retried": again}))
        return
    out.print(f"{job_id}: {again} notification(s) tried again" if again else f"{job_id}: no notification was dead")


@schedule_app.command("add")
@_guard
def schedule_add(
    name: str,
    prompt: Annotated[str, typer.Argument(help="The prompt (`-` reads stdin, `@file` a file).")],
    cron: Annotated[str | None, typer.Option(help="A cron expression, e.g. '0 2 * * *'.")] = None,
    every: Annotated[int | None, typer.Option(help="Or: every this many seconds.", min=1)] = None,
    tz: Annotated[str, typer.Option(help="The time zone the cron expression is read in.")] = "UTC",
    on_missed: Annotated[str, typer.Option(help="A tick no worker reached in time: skip, or run_once.")] = "skip",
    tenant: ScheduleTenantOpt = DEFAULT_TENANT,
    spec: Annotated[
        str | None, typer.Option(help="More spec fields as a JSON object (JSON text or @file): tools, cwd, …")
    ] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a schedule of that name.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a schedule: the fleet submits PROMPT (and --spec's fields) on every tick, exactly once per tick."""
    fields: dict[str, Any] = {}
    if spec is not None:
        try:
            fields = json.loads(_read_text_arg(spec, "spec"))
        except ValueError as exc:
            raise JobSpecError([("spec", f"not JSON: {exc}")]) from None
        if not isinstance(fields, dict):
            raise JobSpecError([("spec", "must be a JSON object of spec fields")])
    fields.update(prompt=_read_text_arg(prompt), tenant=tenant)
    schedule = _client().add_schedule(
        name, fields, cron=cron, every_s=every, tz=tz, on_missed=on_missed, replace=replace
    )
    [info] = [i for i in _client().schedules(tenant) if i.schedule.name == name]
    if as_json:
        print(info.model_dump_json())
    else:
        rule = f"cron {schedule.cron!r} ({schedule.tz})" if schedule.cron else f"every {schedule.every_s} s"
        out.print(f"schedule {name}: {rule}; next tick {info.next_tick}", highlight=False, markup=False)


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
    table = Table("name", "tenant", "rule", "next tick", "fired", "missed", "last job")
    for info in infos:
        s = info.schedule
        rule = f"{s.cron} ({s.tz})" if s.cron else f"every {s.every_s} s"
        nxt = "paused" if s.paused else (info.next_tick.strftime("%Y-%m-%d %H:%M:%S") if info.next_tick else "-")
        table.add_row(s.name, s.tenant, rule, nxt, str(info.fired), str(info.missed), info.last_job_id or "-")
    out.print(table)


def _schedule_action(action: str, name: str, tenant: str, as_json: bool) -> None:
    client = _client()
    getattr(client, f"{action}_schedule")(name, tenant)
    if as_json:
        print(json.dumps({"name": name, "tenant": tenant, "done": action}))
    else:
        out.print(f"schedule {name}: {action.removesuffix('e')}ed", highlight=False)


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
) -> None:
    """The fleet, live: accounts, queues, workers, runs in flight, recent finishes, jobs/s. `q` quits."""
    from claudeq.producer.top import run

    try:
        run(_client(), interval=interval, once=once, console=out)
    except KeyboardInterrupt:
        pass


@app.command("tenants")
@_guard
def tenants_cmd(as_json: JsonOpt = False) -> None:
    """Tenants: runs in flight (vs max_concurrency), jobs waiting, spend this hour and day (UTC) vs the caps."""
    from claudeq.tenant_state import TenantStore

    settings = _settings()
    store = Client(settings).store
    slots = sum(a.max_concurrency for a in settings.accounts.accounts) if settings.tenants.reserve_share else None
    names = [a.name for a in settings.accounts.accounts]
    usage = TenantStore(store.redis, store.keys, settings.tenants, accounts=names).usage(slots=slots)
    if as_json:
        print(json.dumps({"tenants": [u.public() for u in usage]}))
        return
    table = Table("tenant", "in flight", "waiting", "weight", "spend / cap per hour", "per day", "on budget")
    for u in usage:
        cap = u.cap
        table.add_row(
            u.name,
            f"{u.in_flight}/{cap}" + (f" ({_share_note(u.balance)})" if cap is not None and cap == u.share_cap else "")
            if cap is not None
            else str(u.in_flight),
            str(u.waiting),
            f"{u.weight:g}",
            _spend(u.spend.hour, u.spend.cap_hour),
            _spend(u.spend.day, u.spend.cap_day),
            u.on_budget,
        )
    out.print(table)


def _share_note(balance: float | None) -> str:
    """The share cap's note: its catch-up balance (slot-seconds) when it moves the cap
    (docs/architecture.md#fair-share)."""
    from claudeq.tenant_state import BALANCE_DEADBAND

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
        from claudeq.producer.mcp_server import parse_address, serve  # imports `mcp`: only for this command
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
    (docs/web.md). With tenants' tokens or CLAUDEQ_WEB_TOKEN, every page needs one."""
    try:
        from claudeq.producer.web import serve  # imports jinja2, starlette, uvicorn: only for this command
    except ModuleNotFoundError as exc:
        exit_missing("claudeq web", exc)
    serve(host, port, _settings())


@config_app.command("check")
def config_check(as_json: JsonOpt = False) -> None:
    """Validate settings and accounts, check every token is present and Redis answers (secrets never shown).
    The Claude CLI and the tools module are checked by `claudeq-worker` at start."""
    problems: list[str] = []
    report: dict[str, Any] = {}
    unreachable = False
    try:
        settings = load_settings()
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json)
    report["redis_url"] = settings.redacted_redis_url()
    try:
        connections.sync_client(settings, socket_connect_timeout=2, socket_timeout=5).ping()
        report["redis"] = "ok"
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
    accounts: list[dict[str, Any]] = []
    try:
        pool = settings.accounts
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"accounts: {exc}", as_json)
    if not pool.accounts:
        problems.append("no accounts: set CLAUDEQ_ACCOUNTS_FILE (see accounts.example.toml) or a token in the env")
    for acct in pool.accounts:
        entry: dict[str, Any] = {"name": acct.name, "kind": acct.kind, "max_concurrency": acct.max_concurrency}
        try:
            acct.read_token()
            entry["token"] = "present"
        except ConfigError as exc:
            entry["token"] = "missing"
            problems.append(str(exc))
        accounts.append(entry)
    report["accounts"] = accounts
    report["queues"] = settings.queues
    from claudeq.worker.run.sandbox import isolation  # no SDK needed

    report["isolation"], isolation_problem = isolation(settings.policy)
    if isolation_problem is not None:
        problems.append(isolation_problem)
    report["problems"] = problems
    if as_json:
        print(json.dumps(report))
    else:
        out.print(f"redis      {report['redis_url']}: {report['redis']}", highlight=False)
        if "archive" in report:
            out.print(f"archive    {report['archive']}", highlight=False)
        out.print(f"isolation  {report['isolation']}", highlight=False)
        for entry in accounts:
            out.print(
                f"account    {entry['name']} ({entry['kind']}, x{entry['max_concurrency']}): token {entry['token']}",
                highlight=False,
            )
        for problem in problems:
            err.print(f"[red]problem:[/red] {problem}", highlight=False)
        if not problems:
            out.print("[green]configuration ok[/green]")
    if unreachable and len(problems) == 1:
        raise typer.Exit(EXIT_ERROR)  # the configuration is fine; the service is not there
    raise typer.Exit(EXIT_BAD_INPUT if problems else EXIT_OK)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
