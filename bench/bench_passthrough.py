"""Benchmark: what the worker's pass-through costs a stream, against the same requests sent to the simulator directly.

    python -m bench.bench_passthrough [--concurrency 16] [--repeats 3]

A worker's pass-through serves that worker's runs only (`CLAUDEQ_CONCURRENCY`, 4 by default), so the default
concurrency here is four workers' worth.

The simulator and the pass-through run as processes of their own (the pass-through as it runs in a worker: its own
thread and loop, a stand-in credential, every response's rate-limit headers parsed and handed to a recorder); the
load comes from the raw keep-alive HTTP client of bench_simulator. Three figures, each through / direct, medians
over the repeats:

* streams: `concurrency` long replies at once, streamed at 200 tokens/s (the API's pace is tens to a few hundred):
  stream throughput (bytes/s over the wave) and the time of each chunk's arrival relative to its stream's start;
* saturation: the same concurrency with instant replies back to back, the most the pair can serve: requests/s,
  and the pass-through's CPU per request next to the simulator's;
* one long instant reply: bytes/s of a single stream.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_simulator import BODY, PROMPT, Connection, cpu_seconds  # noqa: E402
from claudeq.simulator.testing import READY_PREFIX, start_simulator_process  # noqa: E402

TOKEN = "sk-ant-oat01-bench-pt"  # a made-up token the simulator accepts


def serve_passthrough(upstream: str) -> None:
    """Run a pass-through with one open run on an account at `upstream`; print its URL and stand-in."""
    from claudeq.config.account_pool import AccountConfig
    from claudeq.worker.passthrough.limit_headers import LimitFacts, LimitHint
    from claudeq.worker.passthrough.server import PassThrough

    seen = [0]

    def sink(account: str, facts: LimitFacts) -> LimitHint | None:
        seen[0] += 1  # the recorder thread's work, without Redis
        return None

    os.environ["CQ_BENCH_TOKEN"] = TOKEN
    server = PassThrough(sink)
    server.start()
    account = AccountConfig(name="bench", kind="oauth", token_env="CQ_BENCH_TOKEN", base_url=upstream)
    grant = server.open_run("bench", account)
    print(f"{READY_PREFIX}{grant.base_url} {grant.token}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()


def raw_request(base_url: str, token: str, body: dict[str, object]) -> bytes:
    """The bytes of a POST /v1/messages as the CLI would send it, with `token`."""
    import json

    payload = json.dumps(body).encode()
    host = base_url.split("//", 1)[1]
    head = (
        f"POST /v1/messages?beta=true HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def timed_stream(host: str, port: int, request: bytes) -> tuple[int, list[float], float]:
    """One request on a fresh connection: (body bytes, arrival time of each read relative to the send, total s)."""
    reader, writer = await asyncio.open_connection(host, port)
    t0 = time.perf_counter()
    writer.write(request)
    arrivals: list[float] = []
    size = 0
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            arrivals.append(time.perf_counter() - t0)
            size += len(data)
            if data.endswith(b"0\r\n\r\n"):
                break
    finally:
        writer.close()
    return size, arrivals, time.perf_counter() - t0


async def wave(url: str, token: str, concurrency: int, body: dict[str, object]) -> tuple[float, list[float]]:
    """`concurrency` streams at once: (bytes/s over the wave, every chunk's arrival time within its stream)."""
    host, port = url.split("//", 1)[1].split(":")
    request = raw_request(url, token, body)
    t0 = time.perf_counter()
    results = await asyncio.gather(*(timed_stream(host, int(port), request) for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return sum(r[0] for r in results) / wall, [t for r in results for t in r[1]]


async def saturate(url: str, token: str, pids: list[int], concurrency: int, rounds: int) -> tuple[float, list[float]]:
    """Instant replies back to back on keep-alive connections: (requests/s, CPU ms per request of each pid)."""
    host, port = url.split("//", 1)[1].split(":")
    request = raw_request(url, token, BODY)
    conns = [Connection(host, int(port)) for _ in range(concurrency)]

    async def worker(conn: Connection, n: int) -> None:
        for _ in range(n):
            await conn.post(request)

    try:
        await asyncio.gather(*(worker(c, 1) for c in conns))
        cpu0 = [cpu_seconds(p) for p in pids]
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c, rounds) for c in conns))
        wall = time.perf_counter() - t0
        cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    finally:
        for conn in conns:
            conn.close()
    n = concurrency * rounds
    return n / wall, [c / n * 1000 for c in cpu]


def start_passthrough(upstream: str) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_passthrough", "--serve-passthrough", upstream],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(READY_PREFIX):
        proc.kill()
        raise RuntimeError("pass-through did not start")
    url, token = line[len(READY_PREFIX) :].split()
    return proc, url, token


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(args: argparse.Namespace) -> None:
    sim_proc, sim_url = start_simulator_process(None)
    procs: list[subprocess.Popen[str]] = [sim_proc]
    try:
        pt_proc, pt_url, stand_in = start_passthrough(sim_url)
        procs.append(pt_proc)
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a shared machine)")

        # Streams at the API's pace.
        tps, out = 200.0, 400
        async with httpx.AsyncClient(base_url=sim_url, trust_env=False) as client:
            await client.post("/_sim/config", json={"latency": {"ttft_s": 0.2, "tokens_per_s": tps}})
        slow = {**BODY, "messages": [{"role": "user", "content": f"{PROMPT} [[sim: tokens out={out}]]"}]}
        ratios, gaps_direct, gaps_through, lags = [], [], [], []
        for _ in range(args.repeats):
            direct_rate, direct_times = await wave(sim_url, TOKEN, args.concurrency, slow)
            through_rate, through_times = await wave(pt_url, stand_in, args.concurrency, slow)
            ratios.append(through_rate / direct_rate)
            gaps_direct.append(statistics.median(direct_times))
            gaps_through.append(statistics.median(through_times))
            lags.append(pct(through_times, 0.99) - pct(direct_times, 0.99))
        med = statistics.median
        print(
            f"streams: {args.concurrency} at once, {out} tokens at {tps:.0f} tokens/s each: throughput through/direct "
            f"{med(ratios):.3f}x; median chunk arrival {med(gaps_through) * 1000:.0f} ms vs "
            f"{med(gaps_direct) * 1000:.0f} ms after the send, p99 later by {med(lags) * 1000:.0f} ms"
        )

        # Saturation: instant replies.
        async with httpx.AsyncClient(base_url=sim_url, trust_env=False) as client:
            await client.post("/_sim/config", json={"latency": {"ttft_s": 0.0, "tokens_per_s": 0.0}})
        rates, pt_cpu, sim_cpu = [], [], []
        for _ in range(args.repeats):
            direct, (direct_sim_cpu,) = await saturate(sim_url, TOKEN, [sim_proc.pid], args.concurrency, args.rounds)
            through, (through_pt, _) = await saturate(
                pt_url, stand_in, [pt_proc.pid, sim_proc.pid], args.concurrency, args.rounds
            )
            rates.append((direct, through))
            pt_cpu.append(through_pt)
            sim_cpu.append(direct_sim_cpu)
        direct_med = med(r[0] for r in rates)
        through_med = med(r[1] for r in rates)
        print(
            f"saturation: {args.concurrency} connections, instant replies: {through_med:.0f} vs {direct_med:.0f} "
            f"requests/s = {through_med / direct_med:.2f}x; pass-through CPU {med(pt_cpu):.2f} ms/request "
            f"(the simulator's own: {med(sim_cpu):.2f} ms)"
        )

        # One long reply as fast as the simulator makes it.
        big = {**BODY, "messages": [{"role": "user", "content": f"{PROMPT} [[sim: tokens out=60000]]"}]}
        big["max_tokens"] = 64000
        singles = []
        host, port = sim_url.split("//", 1)[1].split(":")
        pt_host, pt_port = pt_url.split("//", 1)[1].split(":")
        for _ in range(args.repeats):
            size_d, _, wall_d = await timed_stream(host, int(port), raw_request(sim_url, TOKEN, big))
            size_t, _, wall_t = await timed_stream(pt_host, int(pt_port), raw_request(pt_url, stand_in, big))
            singles.append(((size_t / wall_t) / (size_d / wall_d), size_d / wall_d))
        print(
            f"one long reply (~240 kB of SSE): {med(s[1] for s in singles) / 1e6:.1f} MB/s direct, "
            f"through/direct {med(s[0] for s in singles):.2f}x"
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve-passthrough", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_passthrough:
        serve_passthrough(args.serve_passthrough)
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
