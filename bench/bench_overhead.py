"""What claudeq adds on top of calling the SDK: the same short jobs (a) through claude-agent-sdk directly and (b)
submitted through claudeq (real Redis, a real `claudeq-worker` process, the real CLI, the simulator), at the same
concurrency.

Throughput: the whole batch of `--jobs` at `--concurrency`, jobs per second, ratio claudeq/direct.
Per-job overhead: `--latency-jobs` jobs run one at a time each way (no lane waiting); the overhead is claudeq's
per-job latency (submit -> succeeded seen by the producer) minus the direct one (query() start -> result), as
median and p95 of the latency distributions, in ms.

    .venv/bin/python -m bench.bench_overhead [--jobs 50] [--concurrency 4] [--latency-jobs 10]

With `--tracing`: the cost of tracing instead (docs/tracing.md). The same claudeq batch with tracing off and on
(producer, worker and the runs' CLIs exporting to an OTLP/HTTP receiver on loopback), `--rounds` pairs in one run
in alternating order (off-on, on-off, …: a trend in the machine's load falls on both sides), a fresh worker per
batch; prints each side's throughput and CPU per job (the worker process and its CLIs) and the ratios on/off.

    .venv/bin/python -m bench.bench_overhead --tracing [--jobs 50] [--concurrency 4] [--rounds 4] [--no-cli-spans]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.run.launcher import bundled_cli
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

PROMPT = '[[sim: text "ok"]] short job {n}'
ROOT = Path(__file__).resolve().parents[1]


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
            status = run_call(client.store.status_call(job_id))
            if status in ("succeeded", "failed", "cancelled"):
                if status != "succeeded":
                    raise RuntimeError(f"claudeq job {job_id} {status}: {client.get(job_id).error}")
                pending.discard(job_id)
                done.append(time.monotonic() - start)
        time.sleep(0.005)
    return sorted(done)


def one_at_a_time_direct(n_jobs: int, account: SimAccount, base_url: str, root: Path) -> list[float]:
    """Per-job latencies (s) of jobs run directly, one at a time."""
    latencies = []
    for n in range(n_jobs):
        where = root / f"seq-{n}"
        where.mkdir()
        latencies.append(asyncio.run(direct(1, 1, account, base_url, where))[0])
    return latencies


def one_at_a_time_claudeq(client: Client, n_jobs: int) -> list[float]:
    """Per-job latencies (s) of jobs submitted through claudeq, one at a time."""
    return [through_claudeq(client, 1)[0] for _ in range(n_jobs)]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_receiver() -> tuple[subprocess.Popen[str], str]:
    """The OTLP receiver in a process of its own (decoding spans takes CPU this process's producer would lose)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.otlp_receiver"], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"the OTLP receiver did not start: {line!r}")
    return proc, line.split()[-1]


def tracing_overhead(args: argparse.Namespace) -> int:
    """The same batch with tracing off and on, alternating; prints the throughput and CPU of each and the ratios."""
    from claudeq import tracing
    from claudeq.simulator.testing import start_simulator_process

    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=args.concurrency)
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-"))
    settings = None
    elapsed: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, float] = {False: 0.0, True: 0.0}
    received: dict[str, int] = {}
    # The simulator and the receiver in processes of their own: this process is the producer alone.
    sim_config = root / "sim.toml"
    sim_config.write_text(f'[[accounts]]\nname = "{account.name}"\ntoken = "{account.token_value}"\n')
    sim_proc, sim_url = start_simulator_process(sim_config)
    receiver, endpoint = start_receiver()
    try:
        accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim_url)
        settings = make_settings(url, unique, accounts_file=accounts_file, concurrency=args.concurrency, warm_clients=0)
        client = Client(settings)
        for round_number in range(args.rounds):
            for traced in (False, True) if round_number % 2 == 0 else (True, False):
                env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} if traced else {}
                if traced and args.no_cli_spans:
                    env["CLAUDEQ_OTEL_CLI"] = "false"
                if traced:
                    os.environ.update(env)
                else:
                    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
                tracing.enabled.cache_clear()
                before = children_cpu()
                worker = start_worker(settings, [account], root, extra_env=env)
                try:
                    through_claudeq(client, 2)  # warm the worker (imports, first CLI start)
                    elapsed[traced].append(through_claudeq(client, args.jobs)[-1])
                finally:
                    stop_all([worker])  # reaped: its CPU and its CLIs' count in children_cpu() now
                cpu[traced] += children_cpu() - before
                took = elapsed[traced][-1]
                print(f"tracing {'on ' if traced else 'off'}: {took:.2f} s ({args.jobs / took:.2f} jobs/s)", flush=True)
        tracing.shutdown()  # the producer's last spans
    finally:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        receiver.terminate()
        out, _ = receiver.communicate(timeout=30)
        if out.strip():
            received = json.loads(out.strip().splitlines()[-1])
        sim_proc.terminate()
        sim_proc.wait(10)
        if settings is not None:
            cleanup = redis.Redis.from_url(url)
            for key in cleanup.scan_iter(match=f"{settings.key_prefix}*", count=1000):
                cleanup.delete(key)
            cleanup.close()
        if private is not None:
            private.stop()
    off_rate = args.jobs * args.rounds / sum(elapsed[False])
    on_rate = args.jobs * args.rounds / sum(elapsed[True])
    ratios = sorted(t_off / t_on for t_off, t_on in zip(elapsed[False], elapsed[True], strict=True))  # jobs/s on/off
    per_job = {side: cpu[side] * 1000 / ((args.jobs + 2) * args.rounds) for side in (False, True)}
    print(f"jobs={args.jobs} concurrency={args.concurrency} rounds={args.rounds}")
    print(f"tracing off: {off_rate:.2f} jobs/s; tracing on: {on_rate:.2f} jobs/s")
    print(f"per-round throughput ratios on/off: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"median per-round throughput ratio on/off: {statistics.median(ratios):.3f}")
    print(f"CPU per job (worker + CLIs): off {per_job[False]:.0f} ms, on {per_job[True]:.0f} ms")
    print(f"CPU ratio tracing on/off: {per_job[True] / per_job[False]:.3f}")
    print(f"spans received: {received.get('spans')} ({received.get('cli_spans')} from the CLIs)")
    print(f"throughput ratio tracing on/off: {on_rate / off_rate:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run both batches and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency-jobs", type=int, default=10)
    parser.add_argument("--tracing", action="store_true", help="measure tracing on against off instead")
    parser.add_argument("--rounds", type=int, default=4, help="with --tracing: off/on pairs")
    parser.add_argument("--no-cli-spans", action="store_true", help="with --tracing: claudeq's spans only")
    args = parser.parse_args(argv)
    if args.tracing:
        return tracing_overhead(args)

    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=args.concurrency)
    root = Path(tempfile.mkdtemp(prefix="claudeq-bench-"))
    workers = []
    settings = None
    try:
        with SimulatorServer({"accounts": [{"name": account.name, "token": account.token_value}]}) as sim:
            accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim.base_url)
            # Cold runs (a CLI per job, as the direct path): what claudeq adds; warm CLIs are bench_warm's.
            settings = make_settings(
                url, unique, accounts_file=accounts_file, concurrency=args.concurrency, warm_clients=0
            )
            warm = root / "warm"
            warm.mkdir()
            asyncio.run(direct(1, 1, account, sim.base_url, warm))  # the first CLI start reads it from disk
            direct_done = asyncio.run(direct(args.jobs, args.concurrency, account, sim.base_url, root))
            direct_latency = one_at_a_time_direct(args.latency_jobs, account, sim.base_url, root)

            workers.append(start_worker(settings, [account], root))
            client = Client(settings)
            through_claudeq(client, 1)  # warm the worker (imports, first CLI start)
            claudeq_done = through_claudeq(client, args.jobs)
            claudeq_latency = one_at_a_time_claudeq(client, args.latency_jobs)
    finally:
        stop_all(workers)
        if settings is not None:
            cleanup = redis.Redis.from_url(url)
            for key in cleanup.scan_iter(match=f"{settings.key_prefix}*", count=1000):
                cleanup.delete(key)
            cleanup.close()
        if private is not None:
            private.stop()

    direct_rate = args.jobs / direct_done[-1]
    claudeq_rate = args.jobs / claudeq_done[-1]
    median_ms = (statistics.median(claudeq_latency) - statistics.median(direct_latency)) * 1000
    p95_ms = (percentile(claudeq_latency, 0.95) - percentile(direct_latency, 0.95)) * 1000
    print(f"jobs={args.jobs} concurrency={args.concurrency} latency_jobs={args.latency_jobs}")
    print(f"direct SDK : {direct_done[-1]:.2f} s  ({direct_rate:.2f} jobs/s)")
    print(f"claudeq    : {claudeq_done[-1]:.2f} s  ({claudeq_rate:.2f} jobs/s)")
    print(
        f"one at a time: direct median {statistics.median(direct_latency) * 1000:.0f} ms, "
        f"claudeq median {statistics.median(claudeq_latency) * 1000:.0f} ms"
    )
    print(f"per-job overhead: median {median_ms:.0f} ms, p95 {p95_ms:.0f} ms")
    print(f"throughput ratio claudeq/direct: {claudeq_rate / direct_rate:.3f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)  # what the workers left on the shared Redis: queues, kombu's bindings of them, prefixes
