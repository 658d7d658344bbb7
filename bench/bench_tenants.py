"""Tenants on a shared fleet: fair share by weight, one tenant's flood against another's trickle, and a spend cap.

Real `claudeq-worker` processes, the real CLI, the simulator (no fake runner: the CLI hides nothing measured here).
Two accounts of `--slots` / 2 slots each; two workers with more task threads than there are slots, so a flood of
messages is taken off the broker and put in the waiting line at once instead of sitting in the broker's FIFO.
Tenants `a` (weight 3) and `b` (weight 1); every job's run takes about `--run-s` seconds (a simulator delay).

Each configuration runs on a fleet of its own (fresh workers and keys):
  (a) weights alone;
  (b) weights, and `a` capped at `max_concurrency` = `--cap-a` (default 3/4 of the slots: under contention 3:1 still
      holds, and a quarter of the slots stays free for `b` whatever `a` submits);
  (c) weights and reserved fair share (`reserve_share = true`, `share_idle_s` = `--idle-s`): no cap by hand; while
      both tenants are active each holds at most its weighted share of the slots (a 6, b 2 of 8), alone every slot.

1. Empty fleet: `b` submits `--trickle` / 5 jobs, one every `--gap-s` seconds; its wait (submit -> its run starts)
   is the baseline.
2. Flood: after `--quiet-s` (default: the idle grace of reserved fair share + 1 s, so `b` is idle and `a` takes every
   slot, the harder case), `a` submits `--flood` jobs at once (submit_many), then `b` submits `--trickle` jobs, one
   every `--gap-s` seconds, while `a`'s backlog waits. Printed: `b`'s p50 / p95 wait against the baseline (target:
   p50 <= 2x), and `b`'s demand in slots (its runs' time / the trickle's time) against its weighted share. Fair share
   promises a tenant whose demand is within its share that another's backlog does not delay it; a tenant asking for
   more than its share waits by design (the default gap keeps `b` at about two thirds of its share, 2 of 8 slots;
   runs take longer than `--run-s` while the flood's CLIs start on a small machine).
3. Contention: `b` submits a burst of the slots x 10 while `a`'s backlog still waits. The share is counted over the
   time both tenants had jobs waiting, two ways: the runs started from the burst's submit plus `--warm-s` (the runs
   in flight then were started before `b` waited) to the start of `b`'s last burst job (then `b` had nothing left
   waiting), and the slot-seconds each tenant's runs held from the burst's submit to that start (a's runs from
   before the burst included: what reserved fair share's catch-up evens out); `a`'s backlog must outlast it
   (checked). Target: a:b within 5% of 3:1.
4. Spend cap (configuration (a) only): tenants `c` and `d` (max_cost_usd_per_hour = 0.05, on_budget = wait) each
   submit 10 jobs of ~$0.024 (one turn) with max_budget_usd = 0.02 (below one turn's cost: the CLI, which checks its
   budget after a turn, overshoots every run's own budget) and 0.03; what each spent against the cap + one run's
   budget (target: <=).

    .venv/bin/python -m bench.bench_tenants [--flood 1000] [--trickle 50] [--slots 8] [--cap-a 6] [--run-s 1.5]
        [--gap-s 1.3] [--configs abc] [--phases 1234] [--idle-s 10] [--quiet-s 11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from claudeq.config.settings import Settings
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.simulator.testing import SimulatorServer
from claudeq.tenants import TenantStore, window_end
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

TENANTS = """
{reserve}

[[tenants]]
name = "a"
weight = 3
{cap_a}

[[tenants]]
name = "b"
weight = 1

[[tenants]]
name = "c"
max_cost_usd_per_hour = 0.05
on_budget = "wait"

[[tenants]]
name = "d"
max_cost_usd_per_hour = 0.05
on_budget = "wait"
"""
WORKERS = 2
#: A run that costs about $0.024 (6,000 input tokens at the default model's price).
COSTLY = "[[sim: tokens in=6000]] [[sim: text ok]]"


def job(tenant: str, n: int, run_s: float, unique: str) -> dict[str, object]:
    return {"prompt": f"[[sim: delay {run_s}]] [[sim: text ok]] {tenant} {n} {unique}", "tenant": tenant}


def wait_s(record: JobRecord) -> float | None:
    """Submit -> its first run started (None: it has not started)."""
    if not record.attempts:
        return None
    return (record.attempts[0].started_at - record.created_at).total_seconds()


def waits(client: Client, ids: list[str], timeout: float) -> list[float]:
    deadline = time.monotonic() + timeout
    out: list[float] = []
    for job_id in ids:
        while True:
            value = wait_s(client.get(job_id))
            if value is not None:
                out.append(value)
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} did not start within {timeout:g} s")
            time.sleep(0.2)
    return out


def trickle(client: Client, tenant: str, n: int, gap_s: float, run_s: float, unique: str) -> list[str]:
    ids = []
    for i in range(n):
        started = time.monotonic()
        ids.append(client.submit(job(tenant, i, run_s, unique)).id)
        time.sleep(max(0.0, gap_s - (time.monotonic() - started)))
    return ids


def run_s(client: Client, job_id: str) -> float:
    """How long the job's runs held a slot (s), waiting for the ones still running."""
    deadline = time.monotonic() + 120
    while True:
        attempts = client.get(job_id).attempts
        if all(a.finished_at is not None for a in attempts) or time.monotonic() > deadline:
            return sum(
                ((a.finished_at or a.started_at) - a.started_at).total_seconds() for a in attempts if a.started_at
            )
        time.sleep(0.2)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def starts(client: Client, ids: list[str]) -> list[float]:
    """The first-run start times (epoch s) of the jobs that started."""
    return [a.started_at.timestamp() for job_id in ids for a in client.get(job_id).attempts[:1]]


def held(client: Client, ids: list[str], start: float, end: float) -> float:
    """Slot-seconds the jobs' runs held between `start` and `end` (epoch s); a run still going counts up to now."""
    now = time.time()
    total = 0.0
    for job_id in ids:
        for a in client.get(job_id).attempts:
            if a.started_at is None:
                continue
            begin = a.started_at.timestamp()
            finish = a.finished_at.timestamp() if a.finished_at is not None else now
            total += max(0.0, min(finish, end) - max(begin, start))
    return total


def spend_cap(client: Client, settings: Settings, tenant: str, budget: float, unique: str) -> None:
    """10 costly jobs of `tenant` (cap $0.05/h) with `budget` each: what it spent against cap + one run's budget."""
    ids = [
        client.submit(prompt=f"{COSTLY} {tenant} {i} {unique}", tenant=tenant, max_budget_usd=budget).id
        for i in range(10)
    ]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        records = [client.get(j) for j in ids]
        next_hour = window_end("hour", time.time()).timestamp()
        # Done when nothing runs or is about to, and what waits, waits for the next hour (its cap).
        if all(r.status in ("succeeded", "failed", "deferred") for r in records) and all(
            r.ready_at is not None and r.ready_at.timestamp() >= next_hour - 1
            for r in records
            if r.status == "deferred"
        ):
            break
        time.sleep(0.5)
    records = [client.get(j) for j in ids]
    spent = sum(r.result.usage.cost_usd for r in records if r.result)
    hour, _ = TenantStore(client.store.redis, client.store.keys, settings.tenants).spend("tenant", tenant)
    ran = sum(1 for r in records if r.attempts)
    per_run = max((r.result.usage.cost_usd for r in records if r.result and r.attempts), default=0.0)
    print(
        f"spend cap $0.05/h, max_budget_usd {budget}: {tenant} ran {ran} of {len(records)} jobs (a run costs "
        f"${per_run:.4f}) and spent ${spent:.4f} (counted ${hour:.4f}); cap + one run's budget = "
        f"${0.05 + budget:.4f} (target: spent <=)"
    )
    for j in ids:
        client.cancel(j)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--flood", type=int, default=1000)
    parser.add_argument("--trickle", type=int, default=50)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--cap-a", type=int, default=None, help="a's max_concurrency in (b) (default: 3/4 of slots)")
    parser.add_argument("--run-s", type=float, default=1.5)
    parser.add_argument("--gap-s", type=float, default=1.3)
    parser.add_argument(
        "--quiet-s", type=float, default=None, help="pause before the flood (default: the idle grace + 1 s)"
    )
    parser.add_argument("--warm-s", type=float, default=None, help="contention counted from burst + this (2 runs)")
    parser.add_argument("--threads", type=int, default=10, help="task threads per worker (above slots / workers)")
    parser.add_argument(
        "--configs", default="abc", help="(a) weights alone, (b) and a's max_concurrency, (c) and reserve_share"
    )
    parser.add_argument("--idle-s", type=float, default=None, help="share_idle_s in (c) (default: the file's)")
    parser.add_argument("--phases", default="1234", help="which phases to run after the baseline (default: all)")
    args = parser.parse_args(argv)
    cap_a = args.cap_a if args.cap_a is not None else max(1, args.slots * 3 // 4)
    for config in args.configs:
        cap = cap_a if config == "b" else None
        reserve = config == "c"
        if config == "a":
            label = "(a) weights alone"
        elif config == "b":
            label = f"(b) weights + a's max_concurrency {cap} of {args.slots} slots"
        else:
            label = "(c) weights + reserve_share"
        print(f"== {label}", flush=True)
        scenario(args, cap, spend="4" in args.phases and config == "a", reserve=reserve)
    return 0


def reserve_lines(on: bool, idle_s: float | None) -> str:
    """The tenants file's top-level reserved fair share options."""
    if not on:
        return ""
    return "reserve_share = true" + ("" if idle_s is None else f"\nshare_idle_s = {idle_s}")


def scenario(args: argparse.Namespace, cap_a: int | None, spend: bool, reserve: bool = False) -> None:
    url, private = redis_url_for_tests()
    root = Path(tempfile.mkdtemp(prefix="claudeq-tenants-"))
    unique = uuid.uuid4().hex[:10]
    per_account = max(1, args.slots // 2)
    accounts = [SimAccount(f"acct-{i}", kind="api_key", max_concurrency=per_account) for i in (1, 2)]
    config = {"accounts": [{"name": a.name, "token": a.token_value, "kind": a.kind} for a in accounts]}
    workers = []
    try:
        with SimulatorServer(config) as sim:
            accounts_file = write_accounts_toml(root / "accounts.toml", accounts, sim.base_url)
            tenants_file = root / "tenants.toml"
            tenants_file.write_text(
                TENANTS.format(
                    cap_a="" if cap_a is None else f"max_concurrency = {cap_a}",
                    reserve=reserve_lines(reserve, args.idle_s),
                )
            )
            settings = make_settings(
                url,
                unique,
                accounts_file=accounts_file,
                tenants_file=tenants_file,
                concurrency=args.threads,
                warm_clients=max(1, per_account),
                cli_max_retries=0,
                shutdown_grace_s=2,
            )
            client = Client(settings)
            workers = [start_worker(settings, accounts, root, wait=False) for _ in range(WORKERS)]
            for worker in workers:
                worker.wait_ready(240)
            print(f"{WORKERS} workers x {args.threads} threads, {len(accounts)} accounts x {per_account} slots")
            print(f"load average before: {load()}")

            # 1. the empty fleet
            base_ids = trickle(client, "b", max(10, args.trickle // 5), args.gap_s, args.run_s, unique)
            base = waits(client, base_ids, 120)
            print(
                f"empty fleet: b's wait p50 {statistics.median(base) * 1000:.0f} ms, p95 {p(base, 0.95) * 1000:.0f} ms"
            )

            # 2. a floods, b trickles
            flood: list[str] = []
            if "2" in args.phases or "3" in args.phases:
                quiet = (10.0 if args.idle_s is None else args.idle_s) + 1 if args.quiet_s is None else args.quiet_s
                time.sleep(quiet)  # b goes idle: a's flood takes every slot before b's next job
                t0 = time.time()
                jobs = [job("a", i, args.run_s, unique) for i in range(args.flood)]
                flood = [h.id for h in client.submit_many(jobs)]
                print(f"a submitted {args.flood} jobs in {time.time() - t0:.1f} s")
            if "2" in args.phases:
                b_t0 = time.time()
                b_ids = trickle(client, "b", args.trickle, args.gap_s, args.run_s, unique)
                contended = waits(client, b_ids, 600)
                b_span = time.time() - b_t0
                demand = sum(run_s(client, j) for j in b_ids) / b_span
                ratio = statistics.median(contended) / statistics.median(base)
                print(
                    f"a's flood: b's wait p50 {statistics.median(contended) * 1000:.0f} ms "
                    f"(x{ratio:.2f} the empty fleet's; target <= 2), p95 {p(contended, 0.95) * 1000:.0f} ms "
                    f"(x{p(contended, 0.95) / p(base, 0.95):.2f})"
                )
                tenths = ", ".join(
                    f"{statistics.median(contended[i : i + 10]):.1f}" for i in range(0, len(contended), 10)
                )
                print(f"  b's median wait per 10 jobs in submit order (s): {tenths}")
                print(
                    f"  b's demand: {demand:.2f} slots (its runs' time / {b_span:.0f} s), its share "
                    f"{args.slots / 4:g} of {args.slots} (weights 3:1)"
                )

            burst: list[str] = []
            # 3. both backlogged: slot share while both have jobs waiting
            if "3" in args.phases:
                t1 = time.time()
                burst = [
                    h.id
                    for h in client.submit_many(
                        [job("b", 10_000 + i, args.run_s, unique) for i in range(args.slots * 10)]
                    )
                ]
                waits(client, burst, 600)
                b_starts = starts(client, burst)
                a_starts = starts(client, flood)
                warm = 2 * args.run_s if args.warm_s is None else args.warm_s
                t2, t3 = t1 + warm, max(b_starts)
                a_left = sum(1 for t in a_starts if t > t3) + (len(flood) - len(a_starts))
                a_runs = sum(1 for t in a_starts if t2 <= t <= t3)
                b_runs = sum(1 for t in b_starts if t2 <= t <= t3)
                share = a_runs / max(1, b_runs)
                print(
                    f"contention for {t3 - t2:.0f} s (from {warm:g} s after b's burst to its last start; a still had "
                    f"{a_left} jobs waiting then): runs started a {a_runs}, b {b_runs}: a:b = {share:.2f}:1 "
                    f"(target 3:1 within 5%: 2.85 .. 3.15)"
                )
                a_held, b_held = held(client, flood, t1, t3), held(client, burst, t1, t3)
                print(
                    f"  slot-seconds held from b's burst to its last start ({t3 - t1:.0f} s, a's runs from before the"
                    f" burst included): a {a_held:.0f}, b {b_held:.0f}: a:b = {a_held / max(1e-9, b_held):.2f}:1"
                    " (target 3:1 within 5%)"
                )
                if a_left == 0:
                    print("  (a's backlog ran out first: the window is not all contention; raise --flood)")
            print(f"load average after: {load()}", flush=True)

            # 4. a spend cap: c's jobs have a budget below one turn's cost (the CLI overshoots each run's own
            # budget by that turn), d's a budget above it.
            for j in [*flood, *burst]:
                client.cancel(j)
            if spend:
                for tenant, budget in (("c", 0.02), ("d", 0.03)):
                    spend_cap(client, settings, tenant, budget, unique)
    finally:
        stop_all(workers, timeout=15)
        cleanup = redis.Redis.from_url(url)
        for key in cleanup.scan_iter(match=f"cqt-{unique}:*", count=1000):
            cleanup.delete(key)
        cleanup.delete(f"claudeq-test-{unique}")
        cleanup.close()
        if private is not None:
            private.stop()


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)  # what the workers left on the shared Redis: queues, kombu's bindings of them, prefixes
