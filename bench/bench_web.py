"""`claudeq web`: how long the job list takes to answer with 100,000 retained jobs, against 1,000 (docs/web.md).

A private redis-server; jobs written through `Client.submit_many` as producers write them (two tenants, 10 % of them
`team-b`'s), then most marked finished with a result and usage the way a record holds them (this bench measures the
list, not the fleet: no worker runs, so these are fake-runner records). `claudeq web`'s app served by uvicorn on
loopback and asked over real HTTP by httpx, as a browser asks it: the first page (50 newest), one tenant's first
page, and a filter almost nothing matches (one job in a thousand failed: the page reads its bounded stretch of the
index, MAX_SCAN entries, and says how far back it looked). Prints the median and p95 of each at both sizes and the
ratio of 100,000 to the 1,000 baseline measured in the same run.

    .venv/bin/python -m bench.bench_web [--jobs 100000] [--baseline 1000] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import redis
import uvicorn
from pydantic import SecretStr

from claudeq.producer.client import Client
from claudeq.producer.web import create_app
from tests.conftest import make_settings
from tests.support import redis_server
from tests.support.redis_server import PrivateRedis

TENANTS = '[[tenants]]\nname = "team-a"\nmcp_token_env = "BENCH_WEB_A"\n\n[[tenants]]\nname = "team-b"\n'
OPERATOR = "bench-operator-token"
CASES = {"first page": "/jobs", "one tenant": "/jobs?tenant=team-b", "rare filter": "/jobs?status=failed"}


def fill(client: Client, r: redis.Redis, count: int, start: int) -> None:
    """`count` more jobs, all finished (one in a thousand failed) but the newest 20: both sizes' first pages then
    show the same mix, and the ratio is the index's size alone."""
    keys = client.store.keys
    for base in range(start, start + count, 1000):
        n = min(1000, start + count - base)
        specs = [
            {"prompt": f"summarize the incident report number {i} and list follow-ups", "tenant": _tenant(i)}
            for i in range(base, base + n)
        ]
        handles = client.submit_many(specs)
        pipe = r.pipeline(transaction=False)
        for i, handle in zip(range(base, base + n), handles, strict=True):
            if i % 1000 == 999:
                error = {"kind": "job", "message": "max turns reached", "retryable": False}
                pipe.hset(keys.job(handle.id), mapping={"status": "failed", "error": json.dumps(error)})
            elif i < start + count - 20:
                usage = {"input_tokens": 1200 + i % 500, "output_tokens": 300 + i % 90, "cost_usd": 0.004}
                result = {"text": "Done: three follow-ups filed.", "num_turns": 3, "usage": usage}
                pipe.hset(keys.job(handle.id), mapping={"status": "succeeded", "result": json.dumps(result)})
        pipe.execute()


def _tenant(i: int) -> str:
    return "team-b" if i % 10 == 0 else "team-a"


def serve(app: object) -> tuple[uvicorn.Server, str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def measure(base: str, path: str, requests: int) -> tuple[float, float, str]:
    """(median ms, p95 ms, a line of what the page said)."""
    times: list[float] = []
    headers = {"accept": "text/html", "authorization": f"Bearer {OPERATOR}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        for _ in range(3):
            http.get(path).raise_for_status()
        body = ""
        for _ in range(requests):
            began = time.perf_counter()
            answer = http.get(path)
            times.append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
            body = answer.text
    rows = body.count("<tr data-job=")
    looked = "looked at" in body.lower()
    times.sort()
    return (
        statistics.median(times),
        times[int(len(times) * 0.95) - 1],
        f"{rows} rows{', bounded scan' if looked else ''}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    system_server = shutil.which("redis-server")
    if system_server:
        redis_server._server_binary = lambda: system_server
    server = PrivateRedis()
    folder = Path(tempfile.mkdtemp(prefix="claudeq-bench-web-"))
    try:
        tenants = folder / "tenants.toml"
        tenants.write_text(TENANTS)
        settings = make_settings(
            server.url, uuid.uuid4().hex[:8], tenants_file=tenants, web_token=SecretStr(OPERATOR)
        )  # with tokens, as a shared fleet runs it: every request is checked
        r = redis.Redis.from_url(server.url)
        client = Client(settings, redis_client=r)
        web, base = serve(create_app(settings, client))
        print(f"claudeq web job list, private redis-server {r.info('server')['redis_version']}, fake-runner records")
        results: dict[int, dict[str, tuple[float, float, str]]] = {}
        written = 0
        for size in (args.baseline, args.jobs):
            began = time.perf_counter()
            fill(client, r, size - written, written)
            written = size
            print(f"  {size:,} jobs retained (written in {time.perf_counter() - began:.1f} s)")
            results[size] = {name: measure(base, path, args.requests) for name, path in CASES.items()}
        print(f"\n  {'page':<14} {'at ' + format(args.baseline, ','):>22} {'at ' + format(args.jobs, ','):>22}  ratio")
        for name in CASES:
            small, large = results[args.baseline][name], results[args.jobs][name]
            print(
                f"  {name:<14} {small[0]:7.1f} ms (p95 {small[1]:6.1f}) {large[0]:7.1f} ms (p95 {large[1]:6.1f})"
                f"  {large[0] / small[0]:4.2f}x   {large[2]}"
            )
        web.should_exit = True
        client.close()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
