"""Benchmark: how fast the simulator streams, against a bare Starlette endpoint streaming the same bytes.

    python bench/bench_simulator.py [--concurrency 200] [--rounds 10] [--repeats 5]

Both servers run as their own processes (one event loop each); the load comes from a minimal raw HTTP/1.1
client on keep-alive connections, and CPU seconds are read from /proc for the server process only, so the client
does not count. Prints requests/s, server CPU ms per request and the ratio simulator / baseline, as medians over
the repeats; then one wave of slow streams (latency model on) showing that many open streams cost little CPU.
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
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from claudeq.simulator.testing import READY_PREFIX, start_simulator_process  # noqa: E402

TOKEN = "sk-ant-oat01-bench"
PROMPT = "Summarise the benefits of a job queue for background agent runs in two sentences."
BODY = {
    "model": "claude-sonnet-5-5",
    "max_tokens": 1024,
    "stream": True,
    "messages": [{"role": "user", "content": PROMPT}],
}
HEADERS = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}


def serve_baseline(payload_path: str) -> None:
    """A bare Starlette app answering POST /v1/messages with fixed SSE bytes (the floor to compare with)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from claudeq.simulator.testing import bind_socket, uvicorn_config

    payload = Path(payload_path).read_bytes()

    async def messages(request: Request) -> StreamingResponse:
        await request.body()

        async def chunks() -> AsyncIterator[bytes]:
            yield payload

        return StreamingResponse(chunks(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app))

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no started event
            await asyncio.sleep(0.01)
        print(f"{READY_PREFIX}http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
        await task

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Connection:
    """A minimal HTTP/1.1 keep-alive client (asyncio streams): the load generator must cost far less CPU than
    the servers it measures, which httpx does not on a 2-core box."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, request: bytes) -> int:
        """Send one request, read the whole (chunked or sized) response; return the body size."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            raise RuntimeError(f"HTTP {status}")
        lower = head.lower()
        if b"transfer-encoding: chunked" in lower:
            size = 0
            while True:
                n = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                await self.reader.readexactly(n + 2)
                size += n
                if n == 0:
                    return size
        length = int(lower.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        await self.reader.readexactly(length)
        return length

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def raw_request(base_url: str, body: dict[str, object]) -> bytes:
    """The bytes of a POST /v1/messages as the CLI would send it."""
    payload = json.dumps(body).encode()
    host = base_url.split("//", 1)[1]
    head = (
        f"POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {TOKEN}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def load(base_url: str, pid: int, concurrency: int, rounds: int, body: dict[str, object]) -> tuple[float, float]:
    """`concurrency` connections each send `rounds` streaming requests back to back; return (requests/s, server
    CPU ms/request)."""
    host, port = base_url.split("//", 1)[1].split(":")
    request = raw_request(base_url, body)
    conns = [Connection(host, int(port)) for _ in range(concurrency)]

    async def worker(conn: Connection, n: int) -> None:
        for _ in range(n):
            await conn.post(request)

    try:
        await asyncio.gather(*(worker(c, 1) for c in conns))  # open and warm up every connection
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(worker(c, rounds) for c in conns))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    finally:
        for conn in conns:
            conn.close()
    n = concurrency * rounds
    return n / wall, cpu / n * 1000


async def slow_wave(base_url: str, pid: int, concurrency: int, body: dict[str, object]) -> tuple[float, float]:
    """One wave of `concurrency` concurrent requests on fresh connections: (wall s, server CPU s)."""
    host, port = base_url.split("//", 1)[1].split(":")
    request = raw_request(base_url, body)
    conns = [Connection(host, int(port)) for _ in range(concurrency)]
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    try:
        await asyncio.gather(*(c.post(request) for c in conns))
    finally:
        for conn in conns:
            conn.close()
    return time.perf_counter() - t0, cpu_seconds(pid) - cpu0


def start_baseline(payload_path: str) -> tuple[subprocess.Popen[str], str]:
    """Start the baseline server process and wait for its ready line."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-baseline", payload_path], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(READY_PREFIX):
        proc.kill()
        raise RuntimeError("baseline server did not start")
    return proc, line[len(READY_PREFIX) :].strip()


async def bench(args: argparse.Namespace) -> None:
    sim_proc, sim_url = start_simulator_process(None)
    procs: list[subprocess.Popen[str]] = [sim_proc]
    try:
        async with httpx.AsyncClient(base_url=sim_url, trust_env=False) as client:
            reference = (await client.post("/v1/messages", json=BODY, headers=HEADERS)).content
        with tempfile.NamedTemporaryFile(suffix=".sse", delete=False) as f:
            f.write(reference)
        base_proc, base_url = start_baseline(f.name)
        procs.append(base_proc)
        print(
            f"payload: {len(reference)} bytes of SSE per request; concurrency {args.concurrency}, "
            f"{args.rounds} waves per repeat, {args.repeats} repeats (medians below)"
        )
        sim_rates, sim_cpus, base_rates, base_cpus, ratios = [], [], [], [], []
        for _ in range(args.repeats):
            s_rate, s_cpu = await load(sim_url, sim_proc.pid, args.concurrency, args.rounds, BODY)
            b_rate, b_cpu = await load(base_url, base_proc.pid, args.concurrency, args.rounds, BODY)
            sim_rates.append(s_rate)
            sim_cpus.append(s_cpu)
            base_rates.append(b_rate)
            base_cpus.append(b_cpu)
            ratios.append(s_cpu / b_cpu)
        med = statistics.median
        print(f"{'':24}{'requests/s':>12}{'server CPU ms/req':>20}")
        print(f"{'simulator':24}{med(sim_rates):12.0f}{med(sim_cpus):20.3f}")
        print(f"{'bare starlette baseline':24}{med(base_rates):12.0f}{med(base_cpus):20.3f}")
        print(
            f"ratio simulator/baseline: throughput {med(sim_rates) / med(base_rates):.2f}x, "
            f"CPU per request {med(ratios):.2f}x"
        )

        # Slow streams: the latency model on, every stream open for seconds at once.
        ttft, tps, out = 0.5, 100.0, 200
        async with httpx.AsyncClient(base_url=sim_url, trust_env=False) as client:
            await client.post("/_sim/config", json={"latency": {"ttft_s": ttft, "tokens_per_s": tps}})
        slow = {**BODY, "messages": [{"role": "user", "content": f"{PROMPT} [[sim: tokens out={out}]]"}]}
        ideal = ttft + out / tps
        wall, cpu = await slow_wave(sim_url, sim_proc.pid, args.concurrency, slow)
        async with httpx.AsyncClient(base_url=sim_url, trust_env=False) as client:
            peak = (await client.get("/_sim/stats")).json()["totals"]["max_in_flight"]
        print(
            f"slow streams: {args.concurrency} concurrent, {out} tokens at {tps:.0f} tok/s after {ttft} s "
            f"(ideal {ideal:.1f} s each): wall {wall:.2f} s, peak in flight {peak}, "
            f"server CPU {cpu / args.concurrency * 1000:.2f} ms/stream"
        )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--serve-baseline", metavar="PAYLOAD", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(args.serve_baseline)
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
