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
×0.1 — per job; throughput (jobs / first submit to last finish); p95 wait (submit to the attempt's start). Then
per way: the cost per job by component, the requests that read their family's system prefix (hits) and those that
wrote it, by cause; billed per hit and per miss; hits per account; and the least any routing could bill on this
plan, from its own misses (each family's first job, each one over one TTL after its family's previous one).

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
from collections import Counter
from dataclasses import dataclass, field
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


def run_way(
    client: Client, plan: list[tuple[float, int]], appends: list[str]
) -> tuple[float, list[float], dict[str, int]]:
    """Submit the plan's jobs at their times; wait for all; (first submit -> last finish in s, waits in s, the family
    of each attempt's session)."""
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
    families = {a.session_id: family for r, (_, family) in zip(records, plan, strict=True) for a in r.attempts}
    return (last - first).total_seconds(), waits, {k: v for k, v in families.items() if k is not None}


#: Why a request wrote its system prefix rather than read it, judged from the log and the simulator's TTL: its
#: family's first request in the way; every earlier one of the family over one TTL ago; the family's prefix warm
#: on another account only; warm on this one yet written (a race with a request in flight); today's prompts.
CAUSES = ("first of family", "gap > TTL", "warm elsewhere", "other", "not cacheable")


@dataclass
class Tally:
    """One way's main requests on the input side: tokens by kind, and hits and misses of the system prefix."""

    plain: int = 0
    written: int = 0
    written_1h: int = 0
    read: int = 0
    hits: int = 0
    hit_billed: float = 0.0
    miss_billed: float = 0.0
    misses: Counter[str] = field(default_factory=Counter)
    per_account: dict[str, list[int]] = field(default_factory=dict)  # name -> [requests, hits]

    @property
    def writes_billed(self) -> float:
        """Cache writes in plain-input equivalents."""
        return WRITE_1H * self.written_1h + WRITE_5M * (self.written - self.written_1h)

    @property
    def billed(self) -> float:
        """Input-side tokens in plain-input equivalents."""
        return self.plain + self.writes_billed + READ * self.read


def tally(
    entries: list[dict[str, Any]], accounts: set[str], families: dict[str, int], ttl_s: float, cacheable: bool
) -> Tally:
    """The main requests on `accounts`, each a hit (read more than it wrote) or a miss with its cause."""
    out = Tally()
    last_use: dict[int | None, dict[str, float]] = {}  # family -> account -> last request (a read refreshes)
    for entry in sorted(entries, key=lambda e: float(e["time"])):
        usage = entry.get("usage")
        if entry.get("kind") != "main" or entry.get("account") not in accounts or not usage:
            continue
        account, at = str(entry["account"]), float(entry["time"])
        one_hour = usage.get("cache_creation_1h", 0)
        cost = usage["input"] + WRITE_1H * one_hour + WRITE_5M * (usage["cache_creation"] - one_hour)
        cost += READ * usage["cache_read"]
        out.plain += usage["input"]
        out.written += usage["cache_creation"]
        out.written_1h += one_hour
        out.read += usage["cache_read"]
        counts = out.per_account.setdefault(account, [0, 0])
        counts[0] += 1
        seen = last_use.setdefault(families.get(str(entry.get("session_id"))), {})
        if usage["cache_read"] > usage["cache_creation"]:
            out.hits += 1
            out.hit_billed += cost
            counts[1] += 1
        else:
            out.miss_billed += cost
            warm = {name for name, when in seen.items() if at - when <= ttl_s}
            if not cacheable:
                cause = "not cacheable"
            elif not seen:
                cause = "first of family"
            elif account in warm:
                cause = "other"
            elif warm:
                cause = "warm elsewhere"
            else:
                cause = "gap > TTL"
            out.misses[cause] += 1
        seen[account] = at
    return out


def scheduled_misses(plan: list[tuple[float, int]], ttl_s: float) -> int:
    """Jobs of the plan that find their family's prefix expired on every account however they are routed: each
    family's first, and each one submitted over one TTL after the family's previous one."""
    last: dict[int, float] = {}
    misses = 0
    for at, family in plan:
        misses += family not in last or at - last[family] > ttl_s
        last[family] = at
    return misses


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
    tallies: dict[str, Tally] = {}
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
                    seconds, waits, families = run_way(Client(settings), plan, appends)
                finally:
                    stop_all([worker])
                entries = httpx.get(f"{sim_url}/_sim/requests", timeout=30).json()
                counted = tally(entries, {a.name for a in pool}, families, args.ttl, cacheable)
                results[way] = Figures(
                    args.jobs, counted.billed, counted.plain, counted.written, counted.read, seconds, waits
                )
                tallies[way] = counted
                print(f"  {way}: {seconds:.1f} s, {counted.billed / args.jobs:,.0f} billed input tokens per job")
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
    print_breakdown(tallies, args.jobs)
    today, spread, affine = results["today"], results["cacheable"], results["affinity"]
    bound = scheduled_misses(plan, args.ttl)
    warm = tallies["affinity"]
    if warm.hits and warm.misses:
        hit, miss = warm.hit_billed / warm.hits, warm.miss_billed / sum(warm.misses.values())
        floor = (bound * miss + (args.jobs - bound) * hit) / args.jobs
        print(
            f"the plan's own misses (first of family + gap > TTL): {bound} of {args.jobs} jobs; at the affinity way's "
            f"{miss:,.0f} per miss and {hit:,.0f} per hit, the least any routing can bill is {floor:,.0f} per job "
            f"= {floor / today.cost_per_job:.2f}x today's"
        )
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


def print_breakdown(tallies: dict[str, Tally], jobs: int) -> None:
    """Each way's cost per job by component, its misses by cause and its hits per account."""
    print("per job, in plain-input equivalents: cache writes (tokens x multiplier) + reads x0.1 + plain = billed")
    head = ("way", "writes", "reads", "plain", "billed", "hits", *CAUSES)
    print("{:10s} {:>7s} {:>6s} {:>6s} {:>7s} {:>5s} {:>15s} {:>9s} {:>14s} {:>5s} {:>13s}".format(*head))
    for way, t in tallies.items():
        causes = [t.misses[c] for c in CAUSES]
        print(
            f"{way:10s} {t.writes_billed / jobs:>7,.0f} {READ * t.read / jobs:>6,.0f} {t.plain / jobs:>6,.0f} "
            f"{t.billed / jobs:>7,.0f} {t.hits:>5} {causes[0]:>15} {causes[1]:>9} {causes[2]:>14} {causes[3]:>5} "
            f"{causes[4]:>13}"
        )
    for way, t in tallies.items():
        hits = f"{t.hit_billed / t.hits:,.0f}" if t.hits else "-"
        misses = sum(t.misses.values())
        per_miss = f"{t.miss_billed / misses:,.0f}" if misses else "-"
        accounts = ", ".join(f"{name} {h}/{n}" for name, (n, h) in sorted(t.per_account.items()))
        print(f"  {way}: billed per hit {hits}, per miss {per_miss}; hits per account: {accounts}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)
