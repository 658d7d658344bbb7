"""Warm CLIs: short jobs at 1, 2 and 4 lanes, in one run, three ways: claudeq with warm CLIs, claudeq cold (a CLI
per job), and the SDK called directly (a CLI per job: `query()`). Real Redis, real `claudeq-worker` processes (one per
way and lane count, `--concurrency` = lanes), the real CLI, the simulator, the pass-through on.

For each lane count, `--rounds` batches of each way, interleaved in a rotating order (a busy machine's load drifts
over the run; interleaving spreads it over the three ways alike). Per way: the throughput of a batch of `--jobs`
short jobs (submit of the whole batch -> the last one seen finished by the producer; the direct SDK: start -> last
result), median over the rounds; the ratios against the targets; the median per-job time (direct: the gaps between
results times the lanes; claudeq: from the attempt's start on its worker to its finish, from the record). Both
workers of a lane count run at once, each on its own queue, and first run a batch of `lanes` jobs that is not
measured (imports, the first CLI start read from disk, and for the warm worker the pool filled), as the direct path
runs one CLI first. CPU per job (less sensitive to a busy machine than wall time): the worker process with the CLIs
it reaped, against this process with its CLIs (the simulator runs in a process of its own).

    .venv/bin/python -m bench.bench_warm [--jobs 12] [--rounds 3] [--lanes 1 2 4]

Targets: warm/cold >= 2.5x at 1 lane and >= 1.8x at 2-4 lanes; claudeq warm / SDK direct >= 1.5x at 2 lanes;
claudeq cold / SDK direct >= 0.97.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.bench_overhead import direct
from claudeq.producer.client import Client
from claudeq.simulator.testing import start_simulator_process
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

PROMPT = '[[sim: text "ok"]] short job {tag} {n}'
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Cell:
    """One way at one lane count: batch times (s), per-job times (s), CPU seconds per job of each batch."""

    batches: list[float] = field(default_factory=list)
    per_job: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def rate(self, jobs: int) -> float:
        """Jobs per second, median over the rounds."""
        return jobs / statistics.median(self.batches)


def process_cpu(pid: int | None = None) -> float:
    """CPU seconds of a process and of its children it reaped (the CLIs): this process when `pid` is None."""
    if pid is None:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def through_claudeq(client: Client, n_jobs: int, tag: str) -> tuple[float, list[float]]:
    """Submit a batch and wait for all of it; (batch seconds, per-job run seconds from the records).

    The wait reads every pending status in one pipelined round trip every 20 ms: a tighter loop of one call per job
    would take CPU from the CLIs it measures on a 2-core machine."""
    start = time.monotonic()
    ids = [client.submit(prompt=PROMPT.format(tag=tag, n=n)).id for n in range(n_jobs)]
    pending = list(ids)
    while pending:
        pipe = client.store.redis.pipeline(transaction=False)
        for job_id in pending:
            pipe.hget(client.store.keys.job(job_id), "status")
        statuses = pipe.execute()
        left = []
        for job_id, raw in zip(pending, statuses, strict=True):
            status = raw.decode() if isinstance(raw, bytes) else raw
            if status in TERMINAL:
                if status != "succeeded":
                    raise RuntimeError(f"job {job_id} {status}: {client.get(job_id).error}")
            else:
                left.append(job_id)
        pending = left
        if pending:
            time.sleep(0.02)
    elapsed = time.monotonic() - start
    per_job: list[float] = []
    for job_id in ids:
        record = client.get(job_id)
        attempt = record.attempts[-1]
        if attempt.started_at is not None and attempt.finished_at is not None:
            per_job.append((attempt.finished_at - attempt.started_at).total_seconds())
    return elapsed, per_job


async def direct_timed(
    n_jobs: int, lanes: int, account: SimAccount, base_url: str, root: Path
) -> tuple[float, list[float]]:
    """The SDK directly: (batch seconds, per-job seconds)."""
    start = time.monotonic()
    done = await direct(n_jobs, lanes, account, base_url, root)
    elapsed = time.monotonic() - start
    # Per-job time, one lane at a time gives it exactly; at several lanes the completion gaps times lanes.
    gaps = [b - a for a, b in zip([0.0, *done], done, strict=False)]
    return elapsed, [g * lanes for g in gaps]


def main(argv: list[str] | None = None) -> int:
    """Run the three ways at each lane count, in interleaved rounds, and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12, help="jobs per batch")
    parser.add_argument("--rounds", type=int, default=3, help="batches of each way per lane count, interleaved")
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args(argv)

    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=2 * max(args.lanes))
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-warm-"))
    cells: dict[tuple[str, int], Cell] = {}
    load_before = os.getloadavg()
    prefixes: list[str] = []
    try:
        # The simulator in a process of its own: the CPU this process uses is then the direct path's alone.
        sim_config = root / "sim.toml"
        sim_config.write_text(f'[[accounts]]\nname = "{account.name}"\ntoken = "{account.token_value}"\n')
        sim_proc, sim_url = start_simulator_process(sim_config)
        try:
            accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim_url)
            first = root / "first"
            first.mkdir()
            asyncio.run(direct(1, 1, account, sim_url, first))  # the first CLI start reads it from disk
            for lanes in args.lanes:
                clients: dict[str, Client] = {}
                pids: dict[str, int] = {}
                workers = []
                try:
                    for way, warm in (("cold", 0), ("warm", lanes)):
                        tag = f"{way}-{lanes}"
                        settings = make_settings(
                            url,
                            f"{unique}-{tag}",
                            accounts_file=accounts_file,
                            concurrency=lanes,
                            warm_clients=warm,
                            run_root=root / f"runs-{tag}",
                        )
                        prefixes.append(settings.key_prefix)
                        workers.append(start_worker(settings, [account], root, worker_id=f"bench-{tag}"))
                        pids[way] = workers[-1].pid
                        clients[way] = Client(settings)
                        through_claudeq(clients[way], lanes, f"{tag}-prime")
                    ways = ["direct", "cold", "warm"]
                    for round_ in range(args.rounds):
                        # Interleaved, in a rotating order: load drifting over the run hits every way alike.
                        for way in ways[round_ % 3 :] + ways[: round_ % 3]:
                            tag = f"{way}-{lanes}-{round_}"
                            pid = pids.get(way)
                            cpu_before = process_cpu(pid)
                            if way == "direct":
                                where = root / tag
                                where.mkdir()
                                elapsed, per_job = asyncio.run(direct_timed(args.jobs, lanes, account, sim_url, where))
                            else:
                                elapsed, per_job = through_claudeq(clients[way], args.jobs, tag)
                            cell = cells.setdefault((way, lanes), Cell())
                            cell.cpu.append((process_cpu(pid) - cpu_before) / args.jobs)
                            cell.batches.append(elapsed)
                            cell.per_job += per_job
                            print(f"  lanes={lanes} round {round_} {way:6s}: {elapsed:.2f} s", flush=True)
                finally:
                    stop_all(workers)
        finally:
            sim_proc.terminate()
            sim_proc.wait(10)
    finally:
        cleanup = redis.Redis.from_url(url)
        for prefix in prefixes:
            for key in cleanup.scan_iter(match=f"{prefix}*", count=1000):
                cleanup.delete(key)
        cleanup.close()
        if private is not None:
            private.stop()
    load_after = os.getloadavg()

    print(f"jobs per batch={args.jobs} rounds={args.rounds} lanes={args.lanes}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(f"{'lanes':>5} {'direct j/s':>10} {'cold j/s':>9} {'warm j/s':>9}   medians per job (ms): direct cold warm")
    for lanes in args.lanes:
        d, c, w = (cells[(way, lanes)] for way in ("direct", "cold", "warm"))
        print(
            f"{lanes:>5} {d.rate(args.jobs):>10.2f} {c.rate(args.jobs):>9.2f} {w.rate(args.jobs):>9.2f}   "
            f"{statistics.median(d.per_job) * 1000:.0f} {statistics.median(c.per_job) * 1000:.0f} "
            f"{statistics.median(w.per_job) * 1000:.0f}"
        )
    print("CPU per job (ms; the worker process and its CLIs / the direct path's process and its CLIs), medians:")
    for lanes in args.lanes:
        d, c, w = (statistics.median(cells[(way, lanes)].cpu) * 1000 for way in ("direct", "cold", "warm"))
        print(
            f"  lanes={lanes} direct {d:.0f}  cold {c:.0f}  warm {w:.0f}   "
            f"cold/direct {c / d:.2f}  warm/cold {w / c:.2f}"
        )
    print("ratios (throughput) against the targets:")
    met = True
    for lanes in args.lanes:
        d, c, w = (cells[(way, lanes)].rate(args.jobs) for way in ("direct", "cold", "warm"))
        checks = [("warm/cold", w / c, 2.5 if lanes == 1 else 1.8), ("cold/direct", c / d, 0.97)]
        if lanes == 2:
            checks.append(("warm/direct", w / d, 1.5))
        for name, ratio, target in checks:
            ok = ratio >= target
            met = met and ok
            print(f"  lanes={lanes} {name:12s} {ratio:5.2f}x  target >= {target:.2f}  {'met' if ok else 'MISSED'}")
    print("all targets met" if met else "some targets missed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)  # what the workers left on the shared Redis: queues, kombu's bindings of them, prefixes
