"""The HTTP API: submitting through `POST /api/v1/jobs` against `Client.submit`, in the same run (docs/http-api.md).

A private redis-server; `claudeq api` as its own process (the command a user runs, uvicorn, the operator's bearer
token checked on each request) and the producer here. Both ways use the same style of client: a thin blocking one
with its connection kept open per caller thread — redis-py (hiredis) for `Client.submit`, the standard library's
http.client with keep-alive on loopback for the API. Three shapes, each both ways, in rounds that alternate which goes
first: one job per call from one caller; one job per call from 4 callers at once (threads, a connection each); 100
jobs per call (`POST /jobs:batch` against `Client.submit_many`). One more line sends one job a call with httpx (what
many Python producers use): its own cost per request is several times http.client's, and on 2 shared cores it counts
against the server. No worker runs: this measures submitting. Prints jobs/s of each and the ratio API / Client
(target ≥ 0.5×), and the CPU each process spent per job (caller, `claudeq api`, redis-server) in the one-caller
shapes: where the time goes.

    .venv/bin/python -m bench.bench_api [--jobs 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis
from pydantic import SecretStr

from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.support import redis_server
from tests.support.redis_server import PrivateRedis
from tests.support.web_proc import free_port
from tests.support.worker_proc import settings_env

OPERATOR = "bench-api-operator-token"
THREADS = 4
BATCH = 100


def spec(i: int) -> dict[str, object]:
    return {"prompt": f"summarize the incident report number {i} and list follow-ups", "max_turns": 5}


def rate(count: int, run: Callable[[], None]) -> float:
    """Jobs per second of `run`, which submits `count` jobs."""
    began = time.perf_counter()
    run()
    return count / (time.perf_counter() - began)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has spent so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Caller:
    """A thin HTTP/1.1 client on one kept-open connection (http.client): opened again when the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"authorization": f"Bearer {OPERATOR}", "content-type": "application/json"}

    def post(self, path: str, body: object) -> bytes:
        data = json.dumps(body).encode()
        try:
            answer = self._send(path, data)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn.close()  # the server closed the idle connection (its keep-alive timeout): a new one
            answer = self._send(path, data)
        content = answer.read()
        if answer.status not in (200, 201):
            raise RuntimeError(f"POST {path}: {answer.status} {content[:200]!r}")
        return content

    def _send(self, path: str, data: bytes) -> http.client.HTTPResponse:
        self.conn.request("POST", f"/api/v1{path}", data, self.headers)
        return self.conn.getresponse()

    def close(self) -> None:
        self.conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="jobs per shape, way and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jobs = max(BATCH, args.jobs // BATCH * BATCH)
    system_server = shutil.which("redis-server")
    if system_server:
        redis_server._server_binary = lambda: system_server
    server = PrivateRedis()
    folder = Path(tempfile.mkdtemp(prefix="claudeq-bench-api-"))
    proc = None
    try:
        settings = make_settings(server.url, uuid.uuid4().hex[:8], web_token=SecretStr(OPERATOR))
        r = redis.Redis.from_url(server.url)
        client = Client(settings, redis_client=r)
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("CLAUDEQ_")}, **settings_env(settings)}
        log = (folder / "api.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "claudeq.producer.cli", "api", "--port", str(port)], env=env, stdout=log, stderr=log
        )
        base = f"http://127.0.0.1:{port}/api/v1"
        http = httpx.Client(base_url=base, headers={"authorization": f"Bearer {OPERATOR}"}, timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                http.get("/healthz").raise_for_status()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "claudeq api did not start"
                time.sleep(0.2)
        pool = ThreadPoolExecutor(THREADS)
        callers = [Caller(port) for _ in range(THREADS)]

        def api_one(n: int, caller: Caller = callers[0]) -> None:
            for i in range(n):
                caller.post("/jobs", spec(i))

        def httpx_one(n: int) -> None:
            for i in range(n):
                http.post("/jobs", json=spec(i)).raise_for_status()

        def client_one(n: int) -> None:
            for i in range(n):
                client.submit(spec(i))

        def api_many(n: int) -> None:
            list(pool.map(lambda c: api_one(n // THREADS, c), callers))

        def client_many(n: int) -> None:
            list(pool.map(lambda _: client_one(n // THREADS), range(THREADS)))

        def api_batch(n: int) -> None:
            for _ in range(n // BATCH):
                callers[0].post("/jobs:batch", {"jobs": [spec(i) for i in range(BATCH)]})

        def client_batch(n: int) -> None:
            for _ in range(n // BATCH):
                client.submit_many([spec(i) for i in range(BATCH)])

        shapes = {
            "one job a call, 1 caller": (api_one, client_one),
            f"one job a call, {THREADS} callers": (api_many, client_many),
            f"{BATCH} jobs a call (batch)": (api_batch, client_batch),
            "one job a call, httpx": (httpx_one, client_one),
        }
        pids = {"caller": os.getpid(), "api": proc.pid, "redis": server.proc.pid}
        cpu: dict[str, dict[str, list[float]]] = {name: {} for name in shapes}
        load = os.getloadavg()[0]
        for api_way, client_way in shapes.values():  # warm both: connections, scripts, imports
            api_way(BATCH)
            client_way(BATCH)
        results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in shapes}
        for round_no in range(args.rounds):
            for name, (api_way, client_way) in shapes.items():
                ways = [(0, api_way), (1, client_way)]
                for which, way in ways if round_no % 2 == 0 else ways[::-1]:
                    before = {p: cpu_s(pid) for p, pid in pids.items()}
                    results[name][which].append(rate(jobs, lambda way=way: way(jobs)))  # type: ignore[misc]
                    for p, pid in pids.items():
                        key = f"{'API' if which == 0 else 'Client'} {p}"
                        cpu[name].setdefault(key, []).append((cpu_s(pid) - before[p]) / jobs * 1e6)
        print(f"submitting through claudeq api vs Client, {jobs} jobs a run, {args.rounds} rounds")
        print(f"  load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}")
        print(f"  {'shape':<28} {'API jobs/s':>11} {'Client jobs/s':>14}  ratio (median)")
        for name, (api_rates, client_rates) in results.items():
            a, c = statistics.median(api_rates), statistics.median(client_rates)
            print(f"  {name:<28} {a:11.0f} {c:14.0f}  {a / c:5.2f}x")
        print("  CPU per job, us (median), caller/claudeq api/redis-server (a Client caller does the submit itself):")
        for name in ("one job a call, 1 caller", "one job a call, httpx"):
            spent = {key: statistics.median(values) for key, values in cpu[name].items()}
            api = "/".join(f"{spent['API ' + p]:.0f}" for p in pids)
            direct = "/".join(f"{spent['Client ' + p]:.0f}" for p in pids)
            print(f"  {name:<28} API {api}   Client {direct}")
        for caller in callers:
            caller.close()
        http.close()
        pool.shutdown()
        client.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
