"""Prompt caching across jobs: what a stream of jobs from families sharing a ~30 KB append costs on the input side,
three ways in one run — today's prompts (the preset's per-run sections inside the system prompt), cacheable prompts
without cache affinity, cacheable prompts with it (docs/architecture.md#cache-affinity). Real Redis, a real
`claudeq-worker` process per way, the real CLI, the simulator in a process of its own caching as the API does with a
short TTL (`cache_ttl_s`), so the run takes minutes with the ratios of the real TTL.

Every way gets the same jobs at the same times: `--families` families (distinct appends), Poisson arrivals from one
seed, each family recurring on average every `--recur` TTLs; three accounts of its own on the simulator (so each way
starts with cold caches), each with a rate-limit window whose utilization the API reports, so the least-used rule
spreads work as it would on real accounts. Per way, from the simulator's request log (main requests): input-side
tokens billed — plain ×1, cache writes ×1.25 (5-minute TTL) or ×2 (one-hour TTL, what the CLI asks for), cache reads
×0.1 — per job; throughput (jobs / first submit to last finish); p95 wait (submit to the attempt's start).

    .venv/bin/python -m bench.bench_cache [--jobs 48] [--families 12] [--ttl 30] [--recur 0.8] [--seed 7]

Targets: with affinity ≤ 0.3× today's cost per job and ≤ 0.7× of cacheable without affinity, at ≥ 0.95× the
throughput and ≤ 1.2× the p95 wait of cacheable without affinity.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from claudeq.producer.client import Client
from claudeq.simulator.testing import start_simulator_process
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

#: (name, cacheable prompts, cache affinity)
WAYS: tuple[tuple[str, bool, bool], ...] = (
    ("today", False, False),
    ("cacheable", True, False),
    ("affinity", True, True),
)
TERMINAL = ("succeeded", "failed", "cancelled")
APPEND_BYTES = 30_000
#: Price multipliers of the input side, against plain input.
WRITE_5M, WRITE_1H, READ = 1.25, 2.0, 0.1


@dataclass
class Figures:
    """One way's results."""

    jobs: int
    billed: float  # input-side tokens, in plain-input equivalents
    plain: int
    written: int
    read: int
    seconds: float
    waits: list[float]

    @property
    def cost_per_job(self) -> float:
        """Billed input-side tokens per job."""
        return self.billed / self.jobs

    @property
    def throughput(self) -> float:
        """Jobs per second, first submit to last finish."""
        return self.jobs / self.seconds

    @property
    def p50_wait(self) -> float:
        """Median of submit -> attempt start (s)."""
        return statistics.median(self.waits)

    @property
    def p95_wait(self) -> float:
        """95th percentile of submit -> attempt start (s)."""
        return statistics.quantiles(self.waits, n=20)[-1] if len(self.waits) > 1 else self.waits[0]


def family_append(family: int, seed: int) -> str:
    """A family's ~30 KB of instructions, distinct from every other family's."""
    rng = random.Random(f"{seed}-{family}")
    words = [f"rule{rng.randrange(10_000)}" for _ in range(APPEND_BYTES // 9)]
    return f"House rules of team {family}.\n" + " ".join(words)[:APPEND_BYTES]


def schedule(jobs: int, families: int, ttl_s: float, recur: float, seed: int) -> list[tuple[float, int]]:
    """(seconds after the start, family) of each job: Poisson arrivals at `families / (recur × TTL)` per second; the
    families come in rounds, each once per round in a shuffled order, so each recurs about every `recur` TTLs."""
    rng = random.Random(seed)
    rate = families / (recur * ttl_s)
    at, out, round_ = 0.0, [], []
    for _ in range(jobs):
        if not round_:
            round_ = rng.sample(range(families), families)
        at += rng.expovariate(rate)
        out.append((at, round_.pop()))
    return out


def run_way(client: Client, plan: list[tuple[float, int]], appends: list[str]) -> tuple[float, list[float]]:
    """Submit the plan's jobs at their times; wait for all; (first submit -> last finish in s, waits in s)."""
    start = time.monotonic()
    ids = []
    for n, (at, family) in enumerate(plan):
        time.sleep(max(0.0, start + at - time.monotonic()))
        prompt = f'[[sim: text "ok"]] family {family} job {n}'
        ids.append(client.submit(prompt=prompt, append_system_prompt=appends[family]).id)
    records = [client.wait(job_id, timeout=600, poll_s=0.2) for job_id in ids]
    failed = [r for r in records if r.status != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} job(s) did not succeed: {failed[0].error}")
    first = min(r.created_at for r in records)
    last = max(r.finished_at for r in records if r.finished_at is not None)
    waits = [(r.attempts[0].started_at - r.created_at).total_seconds() for r in records]
    return (last - first).total_seconds(), waits


def billed(entries: list[dict[str, Any]], accounts: set[str]) -> tuple[float, int, int, int]:
    """(billed input-side tokens, plain, written, read) of the main requests on `accounts`."""
    total, plain, written, read = 0.0, 0, 0, 0
    for entry in entries:
        usage = entry.get("usage")
        if entry.get("kind") != "main" or entry.get("account") not in accounts or not usage:
            continue
        one_hour = usage.get("cache_creation_1h", 0)
        total += usage["input"] + WRITE_1H * one_hour + WRITE_5M * (usage["cache_creation"] - one_hour)
        total += READ * usage["cache_read"]
        plain, written, read = plain + usage["input"], written + usage["cache_creation"], read + usage["cache_read"]
    return total, plain, written, read


def main(argv: list[str] | None = None) -> int:
    """Run the three ways on the same plan and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=48, help="jobs per way")
    parser.add_argument("--families", type=int, default=12)
    parser.add_argument("--ttl", type=float, default=30.0, help="the simulator's cache TTL (s)")
    parser.add_argument("--recur", type=float, default=0.8, help="mean gap between a family's jobs, in TTLs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=3, help="runs in flight per worker")
    args = parser.parse_args(argv)

    plan = schedule(args.jobs, args.families, args.ttl, args.recur, args.seed)
    appends = [family_append(f, args.seed) for f in range(args.families)]
    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-cache-"))
    accounts = {way: [SimAccount(f"{way}-{i}", max_concurrency=2) for i in range(3)] for way, _, _ in WAYS}
    results: dict[str, Figures] = {}
    prefixes: list[str] = []
    try:
        lines = [f"cache_ttl_s = {args.ttl}", "[latency]", "ttft_s = 1.0"]
        for account in (a for pool in accounts.values() for a in pool):
            lines += [
                "[[accounts]]",
                f'name = "{account.name}"',
                f'token = "{account.token_value}"',
                "[[accounts.windows]]",
                'family = "5h"',
                "length_s = 18000",
                "tokens = 4000000",
            ]
        sim_config = root / "sim.toml"
        sim_config.write_text("\n".join(lines) + "\n")
        sim_proc, sim_url = start_simulator_process(sim_config)
        try:
            for way, cacheable, affinity in WAYS:
                pool = accounts[way]
                settings = make_settings(
                    url,
                    f"{unique}-{way}",
                    accounts_file=write_accounts_toml(root / f"accounts-{way}.toml", pool, sim_url),
                    concurrency=args.concurrency,
                    warm_clients=0,
                    cacheable_prompts=cacheable,
                    cache_affinity=affinity,
                    run_root=root / f"runs-{way}",
                )
                prefixes.append(settings.key_prefix)
                worker = start_worker(settings, pool, root, worker_id=f"bench-cache-{way}")
                try:
                    seconds, waits = run_way(Client(settings), plan, appends)
                finally:
                    stop_all([worker])
                entries = httpx.get(f"{sim_url}/_sim/requests", timeout=30).json()
                cost, plain, written, read = billed(entries, {a.name for a in pool})
                results[way] = Figures(args.jobs, cost, plain, written, read, seconds, waits)
                print(f"  {way}: {seconds:.1f} s, {cost / args.jobs:,.0f} billed input tokens per job", flush=True)
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

    print(
        f"jobs={args.jobs} families={args.families} ttl={args.ttl:g}s recur={args.recur:g} TTL seed={args.seed} "
        f"concurrency={args.concurrency}; real CLI, simulator"
    )
    head = ("way", "billed/job", "plain", "written", "read", "jobs/s", "p50 wait", "p95 wait")
    print("{:10s} {:>10s} {:>8s} {:>9s} {:>9s} {:>7s} {:>9s} {:>9s}".format(*head))
    for way, _, _ in WAYS:
        r = results[way]
        print(
            f"{way:10s} {r.cost_per_job:>10,.0f} {r.plain:>8,} {r.written:>9,} {r.read:>9,} {r.throughput:>7.3f} "
            f"{r.p50_wait:>8.2f}s {r.p95_wait:>8.2f}s"
        )
    today, spread, affine = results["today"], results["cacheable"], results["affinity"]
    checks = [
        ("affinity / today, cost per job", affine.cost_per_job / today.cost_per_job, "<=", 0.3),
        ("affinity / cacheable, cost per job", affine.cost_per_job / spread.cost_per_job, "<=", 0.7),
        ("affinity / cacheable, throughput", affine.throughput / spread.throughput, ">=", 0.95),
        ("affinity / cacheable, p95 wait", affine.p95_wait / max(spread.p95_wait, 1e-9), "<=", 1.2),
    ]
    met = True
    for name, ratio, sense, target in checks:
        ok = ratio <= target if sense == "<=" else ratio >= target
        met = met and ok
        print(f"  {name:36s} {ratio:5.2f}x  target {sense} {target:.2f}  {'met' if ok else 'MISSED'}")
    print("all targets met" if met else "some targets missed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)
