"""Goodput under rate limits: claudeq against the Celery code a user would write, on the same simulated accounts.

Three OAuth accounts with small windows on the simulator (they start at their first request, as the real ones do),
three worker processes each, a fixed run time and a backlog larger than the accounts can serve:

* claudeq: real `claudeq-worker` processes; accounts chosen by state, cooled until `resets_at`, jobs deferred while
  nothing is free.
* naive: a plain Celery task calling the SDK, the job's account fixed round-robin at submit, `autoretry_for` with
  exponential backoff (full jitter, capped at 30 s), run by real `celery worker` processes (thread pool).

Printed per run: jobs completed in the run time, the fraction of the accounts' theoretical capacity used (requests
per window x run time / window length), rejected requests per account-window (worst and mean), CLI spawns spent on
rejected requests, worker-slot seconds spent on rejected runs and spent waiting in place; then claudeq/naive.
Also run with unequal accounts (one with a quarter of the others' limit), and on API-key accounts, which get no
RateLimitEvent, only a plain 429 with `retry-after` and the `anthropic-ratelimit-*` headers on every response: 3
accounts of 6 requests per 20 s window for 60 s (`api-key`), and the same accounts limited by tokens per window
(`tokens`; capacity = the token limits over the tokens one served request took).

    .venv/bin/python -m bench.bench_goodput [--run-s 30] [--window-s 15] [--requests 4]
        [--scenario oauth|api-key|tokens]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.simulator.testing import SimulatorServer
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, WorkerProcess, start_worker, stop_all, write_accounts_toml

PROMPT = '[[sim: text "ok"]] goodput job {n}'
#: The window-aware admission scenarios.
ADMISSION = ["ceilings", "stampede", "family", "priorities", "predictive"]
WORKERS = 3
CONCURRENCY = 2  # per worker process; also each account's max_concurrency

# ---- the naive baseline: what a user would write -------------------------------------------------------------------

_NAIVE = json.loads(os.environ.get("GOODPUT_NAIVE", "{}"))
naive_app = Celery("naive", broker=_NAIVE.get("redis_url", "redis://127.0.0.1:6379/0"))
naive_app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=_NAIVE.get("queue", "naive"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@naive_app.task(  # type: ignore[untyped-decorator]
    bind=True,
    name="naive.run",
    autoretry_for=(Exception,),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=100,
)
def naive_run(self: Any, n: int, account: str, model: str | None = None) -> None:
    """Run one job on its account through the SDK; any error is retried by Celery with exponential backoff."""
    from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

    acct = _NAIVE["accounts"][account]
    config_dir = Path(tempfile.mkdtemp(prefix="naive-"))
    token_var = "ANTHROPIC_API_KEY" if acct.get("kind") == "api_key" else "CLAUDE_CODE_OAUTH_TOKEN"
    other_var = "CLAUDE_CODE_OAUTH_TOKEN" if token_var == "ANTHROPIC_API_KEY" else "ANTHROPIC_API_KEY"
    options = ClaudeAgentOptions(
        tools=[],
        setting_sources=[],
        model=model,
        env={
            "ANTHROPIC_BASE_URL": acct["base_url"],
            token_var: acct["token"],
            other_var: "",
            "CLAUDE_CONFIG_DIR": str(config_dir),
            # Same as claudeq's runs, so both spend exactly one request per attempt.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        },
    )

    async def go() -> None:
        async for message in query(prompt=PROMPT.format(n=n), options=options):
            if isinstance(message, ResultMessage) and message.is_error:
                raise RuntimeError(message.result or "error result")

    started = time.time()
    ok = False
    try:
        asyncio.run(go())
        ok = True
    finally:
        entry = {"n": n, "account": account, "start": started, "end": time.time(), "ok": ok, "model": model}
        client = redis.Redis.from_url(_NAIVE["redis_url"])
        client.rpush(_NAIVE["log_key"], json.dumps(entry))
        client.close()


# ---- measurement ---------------------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What one run achieved."""

    completed: int
    capacity: float
    rejected_per_window: dict[str, list[int]]  # account -> rejected requests in each window it had
    rejected_spawns: int
    rejected_slot_s: float
    waiting_slot_s: float
    #: The simulator's request log, and per job: n, model, priority, submitted, started (the successful run's
    #: start), ended, ok, account — for the admission scenarios' figures.
    log: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: (account, epoch s) of every attempt's start (a CLI started for it), rejected ones included.
    starts: list[tuple[str, float]] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        """Completed jobs over the accounts' theoretical capacity in the run time."""
        return self.completed / self.capacity

    def worst_rejected(self) -> int:
        """The most rejected requests any account had in one window."""
        return max((max(v) for v in self.rejected_per_window.values() if v), default=0)

    def mean_rejected(self) -> float:
        """Rejected requests per account-window, on average."""
        counts = [c for v in self.rejected_per_window.values() for c in v]
        return sum(counts) / len(counts) if counts else 0.0


def rejected_by_window(log: list[dict[str, Any]], window_s: float, until: float) -> dict[str, list[int]]:
    """Replay the simulator's request log with its window rule (a window starts at the first request after the last
    one reset) and count the 429s of each account's windows."""
    out: dict[str, list[int]] = {}
    starts: dict[str, float] = {}
    for entry in sorted(log, key=lambda e: e["time"]):
        name = entry.get("account")
        if name is None or entry.get("kind") != "main" or entry["time"] > until:
            continue
        start = starts.get(name)
        if start is None or entry["time"] >= start + window_s:
            starts[name] = entry["time"]
            out.setdefault(name, []).append(0)
        if entry.get("status") == 429:
            out[name][-1] += 1
    return out


#: Requests per window when the scenario limits tokens (the API sends a requests family too; this one never binds).
TOKENS_SCENARIO_REQUESTS = 1000


def sim_config(
    accounts: list[SimAccount], limits: dict[str, int], window_s: float, tokens: dict[str, int] | None = None
) -> dict[str, Any]:
    """The simulator's accounts: one 5h-family window of `window_s` each, limiting requests (or tokens)."""

    def window(name: str) -> dict[str, Any]:
        if tokens is not None:
            return {"family": "5h", "length_s": window_s, "requests": TOKENS_SCENARIO_REQUESTS, "tokens": tokens[name]}
        return {"family": "5h", "length_s": window_s, "requests": limits[name]}

    return {
        "request_log_size": 20000,
        "accounts": [
            {"name": a.name, "token": a.token_value, "kind": a.kind, "windows": [window(a.name)]} for a in accounts
        ],
    }


def token_capacity(sim: SimulatorServer, tokens: dict[str, int], window_s: float, run_s: float) -> float:
    """Jobs the token limits allow in the run: tokens per window x windows / tokens one served request took."""
    stats = sim.stats()["accounts"]
    served = sum(a["requests"] - a["rejected"] for a in stats.values())
    used = sum(sum(a["tokens"].values()) for a in stats.values())
    per_job = used / served if served else float("inf")
    return sum(tokens.values()) * run_s / window_s / per_job


@dataclass(frozen=True)
class Job:
    """One job of a scenario's backlog: its model and priority (None: the defaults)."""

    model: str | None = None
    priority: int = 0
    delay_s: float = 0.0  # submitted this long after the run starts


def backlog(capacity: float) -> list[Job]:
    """The default backlog: half again what the accounts can serve, plus a few."""
    return [Job() for _ in range(int(capacity * 1.5) + 6)]


def run_claudeq(
    url: str,
    accounts: list[SimAccount],
    limits: dict[str, int],
    window_s: float,
    run_s: float,
    root: Path,
    tokens: dict[str, int] | None = None,
    *,
    sim_cfg: dict[str, Any] | None = None,
    jobs: list[Job] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Figures:
    """Fixed-time run through claudeq workers; counts jobs finished within `run_s` of the first submit."""
    unique = uuid.uuid4().hex[:10]
    capacity = sum(limits.values()) * run_s / window_s
    jobs = jobs if jobs is not None else backlog(capacity)
    workers: list[WorkerProcess] = []
    with SimulatorServer(sim_cfg or sim_config(accounts, limits, window_s, tokens)) as sim:
        accounts_file = write_accounts_toml(root / f"accounts-{unique}.toml", accounts, sim.base_url)
        settings = make_settings(
            url,
            unique,
            accounts_file=accounts_file,
            concurrency=CONCURRENCY,
            cli_max_retries=0,
            shutdown_grace_s=2,
            **(overrides or {}),
        )
        client = Client(settings)
        try:
            workers = [start_worker(settings, accounts, root, wait=False) for _ in range(WORKERS)]
            for worker in workers:
                worker.wait_ready(240)
            t0 = time.time()
            ids = []
            for n, job in enumerate(jobs):
                time.sleep(max(0.0, t0 + job.delay_s - time.time()))
                ids.append(client.submit(prompt=PROMPT.format(n=n), model=job.model, priority=job.priority).id)
            time.sleep(max(0.0, t0 + run_s - time.time()))
            records = [run_call(client.store.get_call(i)) for i in ids]
            log = sim.requests()
            until = t0 + run_s
            if tokens is not None:
                capacity = token_capacity(sim, tokens, window_s, run_s)
            figures = Figures(
                completed=sum(1 for r in records if _done_by(r, until)),
                capacity=capacity,
                rejected_per_window=rejected_by_window(log, window_s, until),
                rejected_spawns=sum(1 for r in records for a in r.attempts if a.outcome == "rate_limited"),
                rejected_slot_s=sum(
                    (a.finished_at - a.started_at).total_seconds()
                    for r in records
                    for a in r.attempts
                    if a.outcome == "rate_limited" and a.finished_at is not None
                ),
                waiting_slot_s=sum(_waits_in_place(client, r.id, settings.retry_in_place_max_s) for r in records),
                log=log,
                runs=[_claudeq_run(n, job, r) for n, (job, r) in enumerate(zip(jobs, records, strict=True))],
                starts=[(a.account, a.started_at.timestamp()) for r in records for a in r.attempts if a.account],
            )
        finally:
            stop_all(workers, timeout=15)
            cleanup = redis.Redis.from_url(url)
            for key in cleanup.scan_iter(match=f"{settings.key_prefix}*", count=1000):
                cleanup.delete(key)
            cleanup.delete(settings.queue)
            cleanup.close()
            client.close()
    return figures


def _claudeq_run(n: int, job: Job, record: JobRecord) -> dict[str, Any]:
    ok = next((a for a in record.attempts if a.outcome == "success"), None)
    return {
        "n": n,
        "model": job.model,
        "priority": job.priority,
        "submitted": record.created_at.timestamp(),
        "started": ok.started_at.timestamp() if ok is not None else None,
        "ended": record.finished_at.timestamp() if ok is not None and record.finished_at else None,
        "ok": ok is not None,
        "account": ok.account if ok is not None else None,
    }


def _done_by(record: JobRecord, until: float) -> bool:
    return record.status == "succeeded" and record.finished_at is not None and record.finished_at.timestamp() <= until


def _waits_in_place(client: Client, job_id: str, bound_s: float) -> float:
    # A retry waits in place (holding the worker's run slot, never the account slot) only up to the bound.
    return sum(
        float(e.data.get("wait_s", 0))
        for e in client.events(job_id)
        if e.type == "retry" and float(e.data.get("wait_s", 0)) <= bound_s
    )


def run_naive(
    url: str,
    accounts: list[SimAccount],
    limits: dict[str, int],
    window_s: float,
    run_s: float,
    root: Path,
    tokens: dict[str, int] | None = None,
    *,
    sim_cfg: dict[str, Any] | None = None,
    jobs: list[Job] | None = None,
) -> Figures:
    """Fixed-time run through plain Celery workers with autoretry_for and exponential backoff."""
    unique = uuid.uuid4().hex[:10]
    capacity = sum(limits.values()) * run_s / window_s
    jobs = jobs if jobs is not None else backlog(capacity)
    queue = f"naive-{unique}"
    log_key = f"naive-{unique}:log"
    procs: list[subprocess.Popen[bytes]] = []
    submitted: dict[int, float] = {}
    with SimulatorServer(sim_cfg or sim_config(accounts, limits, window_s, tokens)) as sim:
        config = {
            "redis_url": url,
            "queue": queue,
            "log_key": log_key,
            "accounts": {a.name: {"token": a.token_value, "base_url": sim.base_url, "kind": a.kind} for a in accounts},
        }
        env = {**os.environ, "GOODPUT_NAIVE": json.dumps(config), "PYTHONUNBUFFERED": "1"}
        app = Celery("naive-producer", broker=url)
        app.conf.task_default_queue = queue
        client = redis.Redis.from_url(url)
        try:
            for i in range(WORKERS):
                log = (root / f"naive-{unique}-{i}.log").open("wb")
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "bench.bench_goodput:naive_app", "worker",
                         "--pool", "threads", "--concurrency", str(CONCURRENCY), "-Q", queue,
                         "--loglevel", "WARNING", "-n", f"naive{i}-{unique}@%h", "--without-gossip",
                         "--without-mingle", "--without-heartbeat"],
                        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(Path(__file__).resolve().parents[1]),
                    )
                )  # fmt: skip
            _wait_celery_ready(app, len(procs))
            t0 = time.time()
            names = [a.name for a in accounts]
            for n, job in enumerate(jobs):
                time.sleep(max(0.0, t0 + job.delay_s - time.time()))
                submitted[n] = time.time()
                # A user who sets priorities passes them on, as Celery's send_task offers.
                app.send_task(
                    "naive.run", args=[n, names[n % len(names)], job.model], queue=queue, priority=job.priority
                )
            time.sleep(max(0.0, t0 + run_s - time.time()))
            entries = [json.loads(e) for e in client.lrange(log_key, 0, -1)]
            log_entries = sim.requests()
            if tokens is not None:
                capacity = token_capacity(sim, tokens, window_s, run_s)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            client.delete(queue, log_key)
            for key in client.scan_iter(match=f"*{queue}*", count=1000):
                client.delete(key)
            client.close()
            app.close()
    until = t0 + run_s
    failed = [e for e in entries if not e["ok"] and e["start"] <= until]
    return Figures(
        completed=sum(1 for e in entries if e["ok"] and e["end"] <= until),
        capacity=capacity,
        rejected_per_window=rejected_by_window(log_entries, window_s, until),
        rejected_spawns=len(failed),
        rejected_slot_s=sum(min(e["end"], until) - e["start"] for e in failed),
        waiting_slot_s=0.0,  # autoretry_for re-sends with a countdown: the wait holds no pool thread
        log=log_entries,
        runs=_naive_runs(jobs, submitted, entries),
        starts=[(e["account"], e["start"]) for e in entries],
    )


def _naive_runs(jobs: list[Job], submitted: dict[int, float], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ok = {e["n"]: e for e in entries if e["ok"]}
    out = []
    for n, job in enumerate(jobs):
        e = ok.get(n)
        out.append(
            {
                "n": n,
                "model": job.model,
                "priority": job.priority,
                "submitted": submitted.get(n),
                "started": e["start"] if e else None,
                "ended": e["end"] if e else None,
                "ok": e is not None,
                "account": e["account"] if e else None,
            }
        )
    return out


def _wait_celery_ready(app: Celery, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= n:
            return
    raise RuntimeError("naive Celery workers did not answer a ping")


def show(name: str, f: Figures) -> None:
    """One line of figures."""
    windows = {k: len(v) for k, v in f.rejected_per_window.items()}
    print(
        f"  {name:8} completed {f.completed:4d} / capacity {f.capacity:5.1f} = {f.fraction:5.2f}   "
        f"rejected per account-window: worst {f.worst_rejected():2d}, mean {f.mean_rejected():4.1f} "
        f"(windows {windows})   CLI spawns on rejected: {f.rejected_spawns:3d} "
        f"({f.rejected_slot_s:5.1f} slot-s)   slot-s waiting in place: {f.waiting_slot_s:.1f}"
    )


def compare(
    label: str,
    url: str,
    accounts: list[SimAccount],
    limits: dict[str, int],
    window_s: float,
    run_s: float,
    root: Path,
    tokens: dict[str, int] | None = None,
) -> tuple[Figures, Figures]:
    """One scenario, the naive baseline then claudeq, in the same run."""
    unit = "tokens" if tokens else "requests"
    print(f"{label}: {unit} per {window_s:g} s window {tokens or limits}, run {run_s:g} s")
    naive = run_naive(url, accounts, limits, window_s, run_s, root, tokens)
    show("naive", naive)
    ours = run_claudeq(url, accounts, limits, window_s, run_s, root, tokens)
    show("claudeq", ours)
    ratio = ours.completed / naive.completed if naive.completed else float("nan")
    rejected = sum(sum(v) for v in ours.rejected_per_window.values())
    naive_rejected = sum(sum(v) for v in naive.rejected_per_window.values())
    print(
        f"  claudeq/naive: completed x{ratio:.2f} ({ours.completed} vs {naive.completed}); rejected requests "
        f"{rejected} vs {naive_rejected}; CLI spawns on rejected {ours.rejected_spawns} vs {naive.rejected_spawns}"
    )
    return naive, ours


# ---- window-aware admission scenarios ------------------------------------------------------------------------------

OPUS = "claude-opus-4-1"
SONNET = "claude-sonnet-4-5"


def served(log: list[dict[str, Any]], until: float) -> list[dict[str, Any]]:
    """Main requests the simulator answered (not rejected) within the run."""
    return [e for e in log if e.get("kind") == "main" and e.get("status") == 200 and e["time"] <= until]


def beyond_ceiling(log: list[dict[str, Any]], ceiling: float, until: float) -> int:
    """Requests the simulator served while the account's five-hour window was already at or above `ceiling`."""
    return sum(1 for e in served(log, until) if e.get("utilization_before", {}).get("five_hour", 0.0) >= ceiling - 1e-9)


def reset_peak(f: Figures, window_s: float, until: float) -> int:
    """Most attempts one account started within any one second of a window that began after a reset (its windows
    replayed from the simulator's log: a window starts at the first request after the last one reset)."""
    resets: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    for e in sorted(f.log, key=lambda e: e["time"]):
        name = e.get("account")
        if not name or e.get("kind") != "main" or e["time"] > until:
            continue
        start = first.get(name)
        if start is None or e["time"] >= start + window_s:
            if start is not None:
                resets.setdefault(name, []).append(start + window_s)
            first[name] = e["time"]
    peak = 0
    for name, times in resets.items():
        starts = sorted(t for account, t in f.starts if account == name and t <= until)
        for reset in times:
            after = [t for t in starts if reset <= t < reset + window_s]
            peak = max([peak, *(sum(1 for u in after if t <= u < t + 1.0) for t in after)])
    return peak


def wait_at(runs: list[dict[str, Any]], priority: int, until: float, q: float = 0.5) -> float:
    """The q-quantile of the waits (submit -> the successful run's start) of the jobs of one priority (nearest rank);
    a job not started by the end of the run counts as waiting until then (a lower bound)."""
    waits = sorted(
        (r["started"] if r["started"] is not None and r["started"] <= until else until) - r["submitted"]
        for r in runs
        if r["priority"] == priority and r["submitted"] is not None
    )
    return waits[min(len(waits) - 1, int(q * len(waits)))] if waits else float("nan")


def overtaken(runs: list[dict[str, Any]], until: float) -> int:
    """Priority-9 jobs that started while a priority-0 job was already waiting (submitted, not started): what the
    waiting line promises never happens. The p50 waits also depend on how much of the window the backlog used up
    before the priority-0 jobs arrived, which no ordering changes."""
    urgent = [(r["submitted"], r["started"] if r["started"] is not None else until) for r in runs if r["priority"] == 0]
    return sum(
        1
        for r in runs
        if r["priority"] == 9
        and r["started"] is not None
        and r["started"] <= until
        and any(sub < r["started"] < start for sub, start in urgent)
    )


def admission(url: str, root: Path, run_s: float, window_s: float, requests: int, chosen: list[str]) -> None:
    """The window-aware admission scenarios, each against the naive baseline in the same run."""
    names = ("acct-1", "acct-2", "acct-3")
    if "ceilings" in chosen:
        ceiling = 0.5
        toml = f"[accounts.ceilings]\nfive_hour = {ceiling}"
        accounts = [SimAccount(n, max_concurrency=CONCURRENCY, toml=toml) for n in names]
        limits = {n: requests for n in names}
        at_ceiling = {n: max(1, int(requests * ceiling)) for n in names}
        cfg = sim_config(accounts, limits, window_s)
        print(
            f"ceilings: five_hour ceiling {ceiling} on {requests} requests per {window_s:g} s window, run {run_s:g} s"
        )
        naive = run_naive(url, accounts, at_ceiling, window_s, run_s, root, sim_cfg=cfg)
        ours = run_claudeq(url, accounts, at_ceiling, window_s, run_s, root, sim_cfg=cfg)
        t_n, t_o = _until(naive, run_s), _until(ours, run_s)
        for name, f, until in (("naive", naive, t_n), ("claudeq", ours, t_o)):
            print(
                f"  {name:8} completed {f.completed:3d} / capacity under the ceiling {f.capacity:5.1f} = "
                f"{f.fraction:4.2f}   requests served beyond the ceiling: {beyond_ceiling(f.log, ceiling, until)}"
            )
        print("  target: 0 requests served beyond a ceiling")
    if "stampede" in chosen:
        ramp, slots, length, per_window = 2.0, WORKERS * CONCURRENCY, 10.0, WORKERS * CONCURRENCY
        accounts = [SimAccount("acct-1", max_concurrency=slots, toml=f"ramp_starts_per_s = {ramp}")]
        limits = {"acct-1": per_window}
        print(
            f"reset stampede: 1 account, {slots} slots, {per_window} requests per {length:g} s window, ramp {ramp:g}/s"
        )
        naive = run_naive(url, accounts, limits, length, run_s, root)
        ours = run_claudeq(url, accounts, limits, length, run_s, root)
        for name, f in (("naive", naive), ("claudeq", ours)):
            peak = reset_peak(f, length, _until(f, run_s))
            print(
                f"  {name:8} completed {f.completed:3d} / capacity {f.capacity:5.1f} = {f.fraction:4.2f}   "
                f"peak starts per second after a reset: {peak}   rejected: "
                f"{sum(sum(v) for v in f.rejected_per_window.values())}"
            )
        print(f"  target: starts per second after a reset <= the ramp ({ramp:g})")
    if "family" in chosen:
        accounts = [SimAccount(n, max_concurrency=CONCURRENCY) for n in names[:2]]
        limits = {n: requests for n in names[:2]}
        cfg = sim_config(accounts, limits, window_s)
        opus_week = {"family": "7d_opus", "length_s": 3600.0, "requests": 1, "used_requests": 1}
        cfg["accounts"][0]["windows"].append(opus_week)
        jobs = [Job(model=OPUS if n % 2 else SONNET) for n in range(int(sum(limits.values()) * run_s / window_s * 1.5))]
        print(f"model-family weekly limit: {names[0]}'s seven_day_opus used up, half the jobs opus, run {run_s:g} s")
        naive = run_naive(url, accounts, limits, window_s, run_s, root, sim_cfg=cfg, jobs=jobs)
        ours = run_claudeq(url, accounts, limits, window_s, run_s, root, sim_cfg=cfg, jobs=jobs)
        for name, f in (("naive", naive), ("claudeq", ours)):
            until = _until(f, run_s)
            done = [r for r in f.runs if r["ok"] and r["ended"] is not None and r["ended"] <= until]
            others_there = sum(1 for r in done if r["model"] == SONNET and r["account"] == names[0])
            opus_done = sum(1 for r in done if r["model"] == OPUS)
            opus_429 = sum(
                1 for e in f.log if e.get("status") == 429 and "opus" in str(e.get("model")) and e["time"] <= until
            )
            print(
                f"  {name:8} completed {len(done):3d} / capacity {f.capacity:5.1f}   sonnet jobs run on {names[0]}: "
                f"{others_there}   opus jobs done: {opus_done}   opus requests rejected: {opus_429}"
            )
        print(f"  target: other models keep running on {names[0]}; opus is not retried against its used-up window")
    if "priorities" in chosen:
        accounts = [SimAccount(n, max_concurrency=CONCURRENCY) for n in names]
        limits = {n: requests for n in names}
        per_window = sum(limits.values())
        total = int(per_window * run_s / window_s * 1.5) + 6
        urgent = total // 4
        # Burst: a priority-9 backlog fills every slot first; priority-0 jobs arrive all at once while it waits.
        jobs = [Job(priority=9) for _ in range(total - urgent)] + [Job(priority=0, delay_s=5.0) for _ in range(urgent)]
        priorities_case(
            f"mixed priorities under scarcity, burst: {total - urgent} priority-9 jobs, then {urgent} priority-0 jobs "
            f"at once 5 s later, run {run_s:g} s",
            url, accounts, limits, window_s, run_s, root, jobs,
        )  # fmt: skip
        # Stream: a bulk batch that needs several windows drains while urgent jobs arrive one at a time (Poisson,
        # seeded, so both systems get the same arrivals); arrivals stop one window before the end so every urgent
        # job sees at least one reset within the run.
        stream_s, bulk, mean_gap = 5 * window_s, 4 * per_window, 5.0
        rng = random.Random(17)
        arrivals, t = [], rng.expovariate(1 / mean_gap)
        while t < stream_s - window_s:
            arrivals.append(t)
            t += rng.expovariate(1 / mean_gap)
        jobs = [Job(priority=9) for _ in range(bulk)] + [Job(priority=0, delay_s=a) for a in arrivals]
        priorities_case(
            f"mixed priorities under scarcity, stream: {bulk} priority-9 jobs at once ({bulk // per_window} windows' "
            f"worth), {len(arrivals)} priority-0 jobs arriving one at a time (Poisson, mean gap {mean_gap:g} s, "
            f"seed 17, over the first {stream_s - window_s:g} s), run {stream_s:g} s",
            url, accounts, limits, window_s, stream_s, root, jobs,
        )  # fmt: skip
    if "predictive" in chosen:
        accounts = [SimAccount(n, max_concurrency=CONCURRENCY) for n in names]
        limits = {n: requests for n in names}
        print(f"predictive admission: {requests} requests per {window_s:g} s window, run {run_s:g} s")
        naive = run_naive(url, accounts, limits, window_s, run_s, root)
        show("naive", naive)
        plain = run_claudeq(url, accounts, limits, window_s, run_s, root, overrides={"predictive_admission": False})
        show("claudeq, no prediction", plain)
        ours = run_claudeq(url, accounts, limits, window_s, run_s, root)
        show("claudeq", ours)
        print("  target: <= 0.5 rejected requests per account-window at >= 0.98 capacity used")


def priorities_case(
    label: str,
    url: str,
    accounts: list[SimAccount],
    limits: dict[str, int],
    window_s: float,
    run_s: float,
    root: Path,
    jobs: list[Job],
) -> None:
    """One priorities case, the naive baseline then claudeq on the same arrivals: waits of priority 0 and 9."""
    print(label)
    naive = run_naive(url, accounts, limits, window_s, run_s, root, jobs=jobs)
    ours = run_claudeq(url, accounts, limits, window_s, run_s, root, jobs=jobs)
    for name, f in (("naive", naive), ("claudeq", ours)):
        until = _until(f, run_s)
        p0, p9 = wait_at(f.runs, 0, until), wait_at(f.runs, 9, until)
        p0_95, p9_95 = wait_at(f.runs, 0, until, 0.95), wait_at(f.runs, 9, until, 0.95)
        print(
            f"  {name:8} completed {f.completed:3d} / capacity {f.capacity:5.1f}   wait p50/p95 priority 0: "
            f"{p0:5.1f}/{p0_95:5.1f} s, priority 9: {p9:5.1f}/{p9_95:5.1f} s (p50 p0/p9 "
            f"{p0 / p9 if p9 else float('nan'):.2f}); priority-9 jobs started while a priority-0 job waited: "
            f"{overtaken(f.runs, until)}"
        )
    print("  target: priority-0 p50 wait <= 1/5 of priority-9's (waits of jobs not started by the end count to it)")


def _until(f: Figures, run_s: float) -> float:
    """The end of a run: its first submit + run_s."""
    starts = [r["submitted"] for r in f.runs if r["submitted"] is not None]
    return (min(starts) if starts else 0.0) + run_s


def main(argv: list[str] | None = None) -> int:
    """Run both systems on each scenario and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-s", type=float, default=30.0)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--requests", type=int, default=4, help="requests per window of a full-size account")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=["oauth", "api-key", "tokens", *ADMISSION],
        help="oauth (equal and unequal accounts), api-key (6 requests per 20 s window, plain 429 with retry-after, "
        "60 s), tokens (a token limit per 20 s window, 60 s); window-aware admission: ceilings, stampede (reset "
        "stampede), family (a model-family weekly limit), priorities (under scarcity), predictive; default: all",
    )
    parser.add_argument("--api-key-run-s", type=float, default=60.0)
    parser.add_argument(
        "--api-key-requests",
        type=int,
        default=6,
        help="requests per 20 s window (api-key scenario); fewer makes the limit bind on a slow, busy machine",
    )
    parser.add_argument(
        "--tokens", type=int, default=2000, help="tokens per 20 s window (tokens scenario; a job takes ~330)"
    )
    args = parser.parse_args(argv)
    chosen = args.scenario or ["oauth", "api-key", "tokens", *ADMISSION]

    url, private = redis_url_for_tests()
    root = Path(tempfile.mkdtemp(prefix="claudeq-goodput-"))
    print(f"{WORKERS} workers x {CONCURRENCY}, account max_concurrency {CONCURRENCY}")
    try:
        if "oauth" in chosen:
            accounts = [SimAccount(name, max_concurrency=CONCURRENCY) for name in ("acct-1", "acct-2", "acct-3")]
            scenarios = {
                "oauth, equal": {a.name: args.requests for a in accounts},
                "oauth, unequal": {**{a.name: args.requests for a in accounts}, "acct-3": max(1, args.requests // 4)},
            }
            for label, limits in scenarios.items():
                compare(label, url, accounts, limits, args.window_s, args.run_s, root)
            print(f"  target: capacity >= 0.95, rejected per account-window <= {CONCURRENCY}")
        keys = [SimAccount(name, kind="api_key", max_concurrency=CONCURRENCY) for name in ("key-1", "key-2", "key-3")]
        if "api-key" in chosen:
            limits = {a.name: args.api_key_requests for a in keys}
            compare("api-key", url, keys, limits, 20.0, args.api_key_run_s, root)
            print("  target: claudeq completes >= naive, with <= 1/10 of its rejected requests")
        admission(url, root, args.run_s, args.window_s, args.requests, chosen)
        if "tokens" in chosen:
            compare(
                "tokens",
                url,
                keys,
                {a.name: TOKENS_SCENARIO_REQUESTS for a in keys},
                20.0,
                args.api_key_run_s,
                root,
                tokens={a.name: args.tokens for a in keys},
            )
            print("  target: claudeq completes >= naive, with <= 1/10 of its rejected requests")
    finally:
        if private is not None:
            private.stop()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)  # what the workers left on the shared Redis: queues, kombu's bindings of them, prefixes
