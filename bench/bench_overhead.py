"""What claudeq adds on top of calling the SDK: the same short jobs (a) through claude-agent-sdk directly and (b)
submitted through claudeq (real Redis, a real `claudeq-worker` process, the real CLI, the simulator), at the same
concurrency.

Per-job overhead: the i-th job to complete through claudeq, minus the i-th to complete directly, both measured from
the start of the batch (same jobs, same concurrency, so the i-th completions correspond). Prints its median and p95
in ms, and the throughput ratio claudeq/direct (jobs per second).

    .venv/bin/python -m bench.bench_overhead [--jobs 50] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from producer.client import Client
from simulator.testing import SimulatorServer
from tests.conftest import make_settings
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml
from worker.launcher import bundled_cli

PROMPT = '[[sim: text "ok"]] short job {n}'


async def direct(n_jobs: int, concurrency: int, account: SimAccount, base_url: str, root: Path) -> list[float]:
    """Run the jobs with the SDK directly; returns completion times from the batch start (s), sorted."""
    sem = asyncio.Semaphore(concurrency)
    start = time.monotonic()
    done: list[float] = []

    async def one(n: int) -> None:
        async with sem:
            config_dir = root / f"direct-{n}"
            config_dir.mkdir()
            options = ClaudeAgentOptions(
                cli_path=str(bundled_cli()),
                tools=[],
                setting_sources=[],
                env={
                    "ANTHROPIC_BASE_URL": base_url,
                    "CLAUDE_CODE_OAUTH_TOKEN": account.token_value,
                    "ANTHROPIC_API_KEY": "",
                    "CLAUDE_CONFIG_DIR": str(config_dir),
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "CLAUDE_CODE_MAX_RETRIES": "0",
                },
            )
            ok = False
            async for message in query(prompt=PROMPT.format(n=n), options=options):
                if isinstance(message, ResultMessage):
                    ok = not message.is_error
            if not ok:
                raise RuntimeError(f"direct job {n} failed")
            done.append(time.monotonic() - start)

    await asyncio.gather(*(one(n) for n in range(n_jobs)))
    return sorted(done)


def through_claudeq(client: Client, n_jobs: int) -> list[float]:
    """Submit the jobs and wait for all; returns completion times from the batch start (s), sorted."""
    start = time.monotonic()
    handles = [client.submit(prompt=PROMPT.format(n=n)) for n in range(n_jobs)]
    pending = {h.id for h in handles}
    done: list[float] = []
    while pending:
        for job_id in list(pending):
            status = client.store.status(job_id)
            if status in ("succeeded", "failed", "cancelled"):
                if status != "succeeded":
                    raise RuntimeError(f"claudeq job {job_id} {status}: {client.get(job_id).error}")
                pending.discard(job_id)
                done.append(time.monotonic() - start)
        time.sleep(0.005)
    return sorted(done)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    """Run both batches and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)

    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=args.concurrency)
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-"))
    workers = []
    settings = None
    try:
        with SimulatorServer({"accounts": [{"name": account.name, "token": account.token_value}]}) as sim:
            accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim.base_url)
            settings = make_settings(url, unique, accounts_file=accounts_file, concurrency=args.concurrency)
            warm = root / "warm"
            warm.mkdir()
            asyncio.run(direct(1, 1, account, sim.base_url, warm))  # the first CLI start reads it from disk
            direct_done = asyncio.run(direct(args.jobs, args.concurrency, account, sim.base_url, root))

            workers.append(start_worker(settings, [account], root))
            client = Client(settings)
            through_claudeq(client, 1)  # warm the worker (imports, first CLI start)
            claudeq_done = through_claudeq(client, args.jobs)
    finally:
        stop_all(workers)
        if settings is not None:
            cleanup = redis.Redis.from_url(url)
            for key in cleanup.scan_iter(match=f"{settings.key_prefix}*", count=1000):
                cleanup.delete(key)
            cleanup.close()
        if private is not None:
            private.stop()

    overhead_ms = [(c - d) * 1000 for c, d in zip(claudeq_done, direct_done, strict=True)]
    direct_rate = args.jobs / direct_done[-1]
    claudeq_rate = args.jobs / claudeq_done[-1]
    print(f"jobs={args.jobs} concurrency={args.concurrency}")
    print(f"direct SDK : {direct_done[-1]:.2f} s  ({direct_rate:.2f} jobs/s)")
    print(f"claudeq    : {claudeq_done[-1]:.2f} s  ({claudeq_rate:.2f} jobs/s)")
    print(
        f"per-job overhead: median {statistics.median(overhead_ms):.0f} ms, p95 {percentile(overhead_ms, 0.95):.0f} ms"
    )
    print(f"throughput ratio claudeq/direct: {claudeq_rate / direct_rate:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
