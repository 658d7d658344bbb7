"""`claudeq top`: the fleet at a glance in a terminal, for people without Grafana.

Accounts (state, slots, cooldown, utilization per window), queues (depth, deferred, oldest wait), runs in flight
(job, account, worker, elapsed, tokens so far), recent finishes and failures, jobs/s — read from Redis on every
refresh, drawn in place with rich's Live. `q` (or Ctrl-C) quits. When the output is not a terminal, one frame is
printed as plain columns, every value whole (docs/cli.md#output), and the command exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from pydantic import ValidationError
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from claudeq.accounts import AccountStore
from claudeq.broker import queue_lists
from claudeq.errors import ConfigError, RecordUnreadable
from claudeq.jobs import status_counts
from claudeq.keys import Keys, text
from claudeq.models import TERMINAL, AccountState, Event, JobRecord, utcnow
from claudeq.script_calls import run_call

from .cli_output import Cell, one_line, print_table
from .client import Client

#: Jobs looked at for "recent finishes" and jobs/s (newest first by creation).
RECENT_WINDOW = 200
#: jobs/s is the number of jobs finished in this many seconds, divided by it.
RATE_WINDOW_S = 60.0
#: How many minutes the per-minute finishes go back (the web fleet page's chart).
MINUTES = 60


@dataclass
class Snapshot:
    """What one frame shows, read from Redis at `at`."""

    at: datetime
    accounts: list[AccountState] = field(default_factory=list)
    accounts_note: str | None = None
    queues: list[tuple[str, int]] = field(default_factory=list)
    deferred: int = 0
    oldest_wait_s: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    running: list[JobRecord] = field(default_factory=list)
    tokens_so_far: dict[str, tuple[int, int]] = field(default_factory=dict)  # job id -> (input, output)
    recent: list[JobRecord] = field(default_factory=list)
    jobs_per_s: float = 0.0
    workers: list[tuple[str, str, float]] = field(default_factory=list)  # id, runs/concurrency, heartbeat age
    #: Jobs finished per minute by status over the last MINUTES minutes, among the RECENT_WINDOW newest jobs:
    #: (the first minute, epoch s // 60; status -> a count per minute).
    finished_per_minute: tuple[int, dict[str, list[int]]] = (0, {})

    def public(self) -> dict[str, Any]:
        """The frame as JSON data (`claudeq top --json`): the same figures, each value whole."""
        return {
            "at": self.at.isoformat(),
            "accounts": [a.public() for a in self.accounts],
            "accounts_note": self.accounts_note,
            "queues": [{"queue": name, "depth": depth} for name, depth in self.queues],
            "deferred": self.deferred,
            "oldest_wait_s": self.oldest_wait_s,
            "counts": self.counts,
            "running": [
                {
                    **r.public(),
                    "tokens_so_far": dict(zip(("input", "output"), self.tokens_so_far.get(r.id, (0, 0)), strict=True)),
                }
                for r in self.running
            ],
            "recent": [r.public() for r in self.recent],
            "jobs_per_s": self.jobs_per_s,
            "workers": [{"id": w, "runs": runs, "heartbeat_age_s": age} for w, runs, age in self.workers],
        }


#: How many of a running job's latest events are read for its latest token figure.
_TOKEN_EVENTS = 20


def _tokens_so_far(r: redis.Redis, keys: Keys, rec: JobRecord) -> tuple[int, int]:
    """(input, output) tokens a running job has used: its finished attempts plus what the current one's latest
    progress event says (workers put `tokens_so_far` on assistant events)."""
    done = rec.result.usage if rec.result else None
    tokens_in = (done.input_tokens + done.cache_read_tokens + done.cache_creation_tokens) if done else 0
    tokens_out = done.output_tokens if done else 0
    attempt = len(rec.attempts)
    entries: list[tuple[Any, dict[Any, Any]]] = r.xrevrange(keys.events(rec.id), count=_TOKEN_EVENTS)  # type: ignore[assignment]
    for _entry_id, fields in entries:
        raw = fields.get(b"event") or fields.get("event")
        try:
            event = Event.model_validate_json(raw or b"{}")
        except ValidationError:
            continue
        so_far = event.data.get("tokens_so_far")
        if isinstance(so_far, dict):
            if event.attempt == attempt:
                tokens_in += int(so_far.get("input", 0))
                tokens_out += int(so_far.get("output", 0))
            break
    return tokens_in, tokens_out


def collect(client: Client) -> Snapshot:
    """Read one snapshot of the fleet from Redis."""
    store, keys, r = client.store, client.store.keys, client.store.redis
    now = utcnow()
    snap = Snapshot(at=now)
    try:
        snap.accounts = AccountStore(r, keys, client.settings.accounts).states()
        if not snap.accounts:
            snap.accounts_note = "no accounts configured here (CLAUDEQ_ACCOUNTS_FILE names the workers' pool)"
    except ConfigError as exc:
        snap.accounts_note = f"accounts: {exc}"
    queues = client.settings.job_queues
    pipe = r.pipeline(transaction=False)
    for queue in queues:
        for name in queue_lists(queue):
            pipe.llen(name)
    lengths = pipe.execute()
    per = len(queue_lists(""))
    snap.queues = [(q, sum(int(n) for n in lengths[i * per : (i + 1) * per])) for i, q in enumerate(queues)]
    snap.deferred = int(r.zcard(keys.deferred))
    snap.counts = status_counts(r, keys, now.timestamp())
    oldest = r.zrange(keys.queued, 0, 0)
    if oldest:
        with contextlib.suppress(Exception):
            snap.oldest_wait_s = (now - run_call(store.get_call(text(oldest[0]))).created_at).total_seconds()
    for job_id in sorted(text(i) for i in r.zrange(keys.running, 0, -1)):
        with contextlib.suppress(Exception):
            rec = run_call(store.get_call(job_id))
            snap.running.append(rec)
            snap.tokens_so_far[job_id] = _tokens_so_far(r, keys, rec)
    snap.running.sort(key=lambda rec: rec.started_at or rec.created_at)
    finished = [
        rec
        for rec in store.list_jobs(limit=RECENT_WINDOW)
        if not isinstance(rec, RecordUnreadable) and rec.status in TERMINAL and rec.finished_at
    ]
    finished.sort(key=lambda rec: rec.finished_at or rec.created_at, reverse=True)
    snap.recent = finished[:8]
    first_minute = int(now.timestamp() // 60) - MINUTES + 1
    snap.finished_per_minute = (first_minute, {status: [0] * MINUTES for status in sorted(TERMINAL)})
    for rec in finished:  # (finished_at is set: `finished` keeps only those)
        index = int(rec.finished_at.timestamp() // 60) - first_minute  # type: ignore[union-attr]
        if 0 <= index < MINUTES:
            snap.finished_per_minute[1][rec.status][index] += 1
    snap.jobs_per_s = (
        sum(1 for rec in finished if rec.finished_at and (now - rec.finished_at).total_seconds() <= RATE_WINDOW_S)
        / RATE_WINDOW_S
    )
    ids = [text(i) for i in r.zrange(keys.workers, 0, -1)]
    pipe = r.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hmget(keys.worker(worker_id), ["runs", "concurrency", "heartbeat"])
    for worker_id, (runs, concurrency, beat) in zip(ids, pipe.execute(), strict=True):
        if beat is None:
            continue  # its heartbeat expired: not live
        snap.workers.append((worker_id, f"{text(runs)}/{text(concurrency)}", now.timestamp() - float(text(beat))))
    return snap


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


_STATE_STYLE = {"ok": "green", "warning": "yellow", "cooling": "cyan", "reserved": "magenta", "disabled": "red"}
_STATUS_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}


def render(snap: Snapshot, title: str) -> Group:
    """One frame."""
    now = snap.at
    counts = " ".join(f"{s} {snap.counts.get(s, 0)}" for s in ("waiting", "queued", "deferred", "running"))
    header = Text.assemble(
        (f"claudeq top · {title} · {now.strftime('%H:%M:%S')} UTC", "bold"),
        f"   {len(snap.workers)} live workers · {counts} · {snap.jobs_per_s:.2f} jobs/s   (q quits)",
    )

    accounts = Table("account", "state", "slots", "cooldown", "utilization", "reason", title="accounts", expand=True)
    for a in snap.accounts:
        style = _STATE_STYLE.get(a.state, "")
        until = (a.cooldown_until - now).total_seconds() if a.cooldown_until and a.cooldown_until > now else None
        util = _utilization(a)
        accounts.add_row(
            a.name,
            Text(a.state, style),
            f"{a.slots_in_use}/{a.max_concurrency}",
            _ago(until) if until else "-",
            util or "-",
            Text(a.reason or ""),
        )
    if snap.accounts_note:
        accounts.add_row(Text(snap.accounts_note), "", "", "", "", "")

    queues = Table("queue", "depth", title="queues", expand=True)
    for name, depth in snap.queues:
        queues.add_row(Text(name), str(depth))
    queues.add_row(Text("deferred set", "dim"), str(snap.deferred))
    queues.add_row(Text("oldest queued job waits", "dim"), _ago(snap.oldest_wait_s))

    workers = Table("worker", "runs", "heartbeat", title="workers", expand=True)
    for worker_id, runs, age in snap.workers:
        workers.add_row(Text(worker_id), runs, f"{age:.0f}s ago")

    running = Table(
        "job", "account", "worker", "attempt", "elapsed", "tokens so far", "prompt", title="running", expand=True
    )
    for rec in snap.running:
        tokens_in, tokens_out = snap.tokens_so_far.get(rec.id, (0, 0))
        tokens = f"{tokens_in}/{tokens_out}" if tokens_in or tokens_out else "-"
        started = rec.attempts[-1].started_at if rec.attempts else rec.started_at
        running.add_row(
            rec.id,
            rec.account or "-",
            rec.worker or "-",
            str(len(rec.attempts)),
            _ago((now - started).total_seconds() if started else None),
            tokens,
            Text(rec.spec.prompt[:40].replace("\n", " ")),
        )

    recent = Table("job", "status", "account", "finished", "cost $", "detail", title="recent finishes", expand=True)
    for rec in snap.recent:
        style = _STATUS_STYLE.get(rec.status, "")
        detail = _detail(rec)
        recent.add_row(
            rec.id,
            Text(rec.status, style),
            rec.account or "-",
            _ago((now - rec.finished_at).total_seconds()) + " ago" if rec.finished_at else "-",
            f"{rec.result.usage.cost_usd:.4f}" if rec.result else "-",
            Text(detail[:50].replace("\n", " ")),
        )
    top = Table.grid(expand=True)
    top.add_column(ratio=3)
    top.add_column(ratio=2)
    top.add_column(ratio=2)
    top.add_row(accounts, queues, workers)
    return Group(header, top, running, recent)


def _utilization(account: AccountState) -> str:
    return ", ".join(f"{w} {i.utilization:.0%}" for w, i in account.windows.items() if i.utilization is not None)


def _detail(rec: JobRecord) -> str:
    return rec.error.message if rec.error else (rec.result.text or "" if rec.result else "")


def print_plain(snap: Snapshot, title: str, console: Console) -> None:
    """One frame for a pipe: the header line, then each table as plain columns under its title, every value whole
    (the same figures as `render`, which crops prompts and details to fit a terminal)."""
    now = snap.at
    counts = " ".join(f"{s} {snap.counts.get(s, 0)}" for s in ("waiting", "queued", "deferred", "running"))
    console.print(
        f"claudeq top · {title} · {now.isoformat()}   {len(snap.workers)} live workers · {counts} · "
        f"{snap.jobs_per_s:.2f} jobs/s",
        soft_wrap=True,
    )

    def section(name: str, headers: list[str], rows: list[list[Cell]]) -> None:
        console.print("")
        console.print(f"# {name}", soft_wrap=True)
        print_table(console, headers, rows)

    account_rows: list[list[Cell]] = []
    for a in snap.accounts:
        until = (a.cooldown_until - now).total_seconds() if a.cooldown_until and a.cooldown_until > now else None
        account_rows.append(
            [
                a.name,
                a.state,
                f"{a.slots_in_use}/{a.max_concurrency}",
                _ago(until) if until else "-",
                _utilization(a).replace(", ", ",") or "-",
                a.reason or "",
            ]
        )
    section("accounts", ["account", "state", "slots", "cooldown", "utilization", "reason"], account_rows)
    if snap.accounts_note:
        console.print(one_line(snap.accounts_note), soft_wrap=True)
    queue_rows: list[list[Cell]] = [[name, str(depth)] for name, depth in snap.queues]
    queue_rows += [["(deferred set)", str(snap.deferred)], ["(oldest queued job waits)", _ago(snap.oldest_wait_s)]]
    section("queues", ["queue", "depth"], queue_rows)
    section(
        "workers",
        ["worker", "runs", "heartbeat"],
        [[worker_id, runs, f"{age:.0f}s ago"] for worker_id, runs, age in snap.workers],
    )
    running_rows: list[list[Cell]] = []
    for rec in snap.running:
        tokens_in, tokens_out = snap.tokens_so_far.get(rec.id, (0, 0))
        started = rec.attempts[-1].started_at if rec.attempts else rec.started_at
        running_rows.append(
            [
                rec.id,
                rec.account or "-",
                rec.worker or "-",
                str(len(rec.attempts)),
                _ago((now - started).total_seconds() if started else None),
                f"{tokens_in}/{tokens_out}" if tokens_in or tokens_out else "-",
                rec.spec.prompt,
            ]
        )
    section("running", ["job", "account", "worker", "attempt", "elapsed", "tokens", "prompt"], running_rows)
    recent_rows: list[list[Cell]] = [
        [
            rec.id,
            rec.status,
            rec.account or "-",
            _ago((now - rec.finished_at).total_seconds()) + " ago" if rec.finished_at else "-",
            f"{rec.result.usage.cost_usd:.4f}" if rec.result else "-",
            _detail(rec),
        ]
        for rec in snap.recent
    ]
    section("recent finishes", ["job", "status", "account", "finished", "cost $", "detail"], recent_rows)


@contextlib.contextmanager
def _keys() -> Iterator[int | None]:
    """stdin in cbreak mode (single keys, no echo) while the view runs; yields its fd, or None if not a terminal."""
    if not sys.stdin.isatty():
        yield None
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run(client: Client, interval: float = 1.0, once: bool = False, console: Console | None = None) -> None:
    """Draw the view until `q` (or one frame with `once`); when stdout is not a terminal, one frame in plain
    columns."""
    console = console or Console()
    title = f"{client.settings.redacted_redis_url()} {client.settings.key_prefix}"
    if not console.is_terminal:
        print_plain(collect(client), title, console)
        return
    if once:
        console.print(render(collect(client), title))
        return
    with _keys() as fd, Live(console=console, screen=False, auto_refresh=False) as live:
        while True:
            live.update(render(collect(client), title), refresh=True)
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                if fd is None:
                    time.sleep(left)
                    break
                ready, _, _ = select.select([fd], [], [], left)
                if ready and os.read(fd, 1) in (b"q", b"Q"):
                    return
