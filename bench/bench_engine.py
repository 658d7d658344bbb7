"""The engine alone: CPU per job of one worker process's engine loop, as built vs its Redis calls all in threads.

No Celery and no CLI: a fake runner (each run sleeps `--run-s`, then returns a canned success with usage) and the
real Redis. `--jobs` jobs are submitted with `submit_many`, then handed to the engine all at once
(`Engine.deliver`, at most `--concurrency` in hand), in a fresh process per measurement:

- **claudeq**, the engine as `claudeq-worker` builds it: a run's calls on the async client from the loop, the
  other sync Redis calls on the loop's few Redis threads (docs/scaling.md#the-engines-redis-client);
- **threads**, the baseline: the same engine with no async client and as many Redis threads as it may have calls
  in flight (`4 + 3 × concurrency`), which is how every Redis call of the engine was made before: through a
  thread each.

The two alternate for `--rounds` rounds (the machine's noise spreads over both); the bench prints each round, the
medians of CPU per job and jobs/s, and the ratio claudeq / threads. A private Redis when none answers at
127.0.0.1:6379 (tests.support.redis_server).

    .venv/bin/python -m bench.bench_engine [--jobs 3000] [--concurrency 200] [--run-s 0.2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from claudeq.models import JobSpec
from claudeq.producer.client import Client
from claudeq.worker.run.fake_runner import BENCH_FAKE_RUNNER_ENV
from tests.conftest import make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, write_accounts_toml

MODES = ("claudeq", "threads")


def measure(mode: str, redis_url: str, jobs: int, concurrency: int, run_s: float) -> dict[str, float]:
    """One measurement in this process: submit, deliver every job, return CPU per job (ms) and jobs/s."""
    os.environ[BENCH_FAKE_RUNNER_ENV] = str(run_s)
    from claudeq.worker import loop_host
    from claudeq.worker.app import build_runtime
    from claudeq.worker.delivery.engine import engine_executor_workers

    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-engine-"))
    accounts = [SimAccount(f"bench-{i}", max_concurrency=4 * concurrency) for i in range(3)]
    for account in accounts:
        os.environ[account.token_env] = account.token_value
    accounts_file = write_accounts_toml(root / "accounts.toml", accounts, "http://127.0.0.1:9")
    settings = make_settings(redis_url, uuid.uuid4().hex[:8], concurrency=concurrency, accounts_file=accounts_file)
    if mode == "threads":
        loop_host.REDIS_THREADS = engine_executor_workers(concurrency)
    runtime = build_runtime(settings, f"bench-engine-{mode}")
    engine = runtime.engine
    if mode == "threads":
        engine.store.use_async(None)  # every store call through a thread, as before the async client
        engine.accounts.use_async(None)
    client = Client(settings)
    ids = [handle.id for handle in client.submit_many([JobSpec(prompt=f"job {n}") for n in range(jobs)])]
    engine.start()

    async def deliver_all() -> None:
        await asyncio.gather(*(engine.deliver(job_id) for job_id in ids))

    cpu0, wall0 = time.process_time(), time.monotonic()
    engine.call(deliver_all()).result()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    r = redis.Redis.from_url(redis_url)
    done = sum(1 for job_id in ids if r.hget(settings.key_prefix + "job:" + job_id, "status") == b"succeeded")
    engine.stop()
    sweep({(redis_url, settings.key_prefix, settings.queue)})  # the jobs' keys, and the messages nobody consumed
    if done != jobs:
        raise SystemExit(f"{mode}: {done} of {jobs} jobs succeeded")
    return {"cpu_ms_per_job": 1000 * cpu / jobs, "jobs_per_s": jobs / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--run-s", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a single measurement (child process)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.redis_url, args.jobs, args.concurrency, args.run_s)))
        return
    url, server = redis_url_for_tests()
    try:
        print(
            f"bench_engine: {args.jobs} jobs, {args.concurrency} at once, {args.run_s:g} s fake runs, 3 accounts, "
            f"one engine per measurement (no Celery, no CLI); {args.rounds} rounds alternating"
        )
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for n in range(args.rounds):
            for mode in MODES:
                cmd = [sys.executable, "-m", "bench.bench_engine", "--one", mode, "--redis-url", url]
                cmd += ["--jobs", str(args.jobs), "--concurrency", str(args.concurrency), "--run-s", str(args.run_s)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                figures = json.loads(out)
                results[mode].append(figures)
                print(
                    f"  round {n + 1} {mode:8} {figures['cpu_ms_per_job']:5.2f} ms CPU per job  "
                    f"{figures['jobs_per_s']:6.0f} jobs/s"
                )
        cpu = {mode: statistics.median(f["cpu_ms_per_job"] for f in results[mode]) for mode in MODES}
        rate = {mode: statistics.median(f["jobs_per_s"] for f in results[mode]) for mode in MODES}
        print(f"\n{'':28}{'claudeq':>10}{'threads':>10}{'ratio':>8}")
        print(
            f"  {'CPU per job (ms, median)':26}{cpu['claudeq']:10.2f}{cpu['threads']:10.2f}"
            f"{cpu['claudeq'] / cpu['threads']:7.2f}x"
        )
        print(
            f"  {'jobs/s (median)':26}{rate['claudeq']:10.0f}{rate['threads']:10.0f}"
            f"{rate['claudeq'] / rate['threads']:7.2f}x"
        )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
