"""The chaos fleet: real worker processes, the simulator with faults on, a killer, Redis restarts — and the checks,
read from witnesses outside claudeq: the simulator's request log, its wire log (every request the pass-throughs
forwarded, on any path: only the CLI's calls, each with an account's credential, no secret anywhere else in them) and
its per-account in-flight counters, the process table, and Redis itself.

`run_soak(config)` drives one soak and returns a `SoakReport`; `tests/chaos/test_soak.py` runs the bounded size,
`python -m tests.chaos.soak` (`make soak`) the long one and prints the table.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from prometheus_client import CollectorRegistry, generate_latest

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.models import FREE_OUTCOMES, TERMINAL, JobRecord
from claudeq.producer.client import Client
from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.metrics.exporter import ClusterCollector
from claudeq.worker.passthrough.server import refusal
from claudeq.worker.run import procs
from tests.conftest import make_settings
from tests.support.redis_server import PrivateRedis
from tests.support.worker_proc import FAST_E2E, SimAccount, WorkerProcess, start_worker, write_accounts_toml

#: Settings of a chaos fleet: the fast e2e ones; runs time out when the model goes silent for 4 s.
CHAOS_SETTINGS: dict[str, Any] = {**FAST_E2E, "idle_timeout_s": 4.0, "first_byte_timeout_s": 20.0}


def _secret(name: str) -> str:
    """A fresh token no redaction pattern recognises: only the worker's knowledge of its accounts keeps it out."""
    return f"chaostok{name}{uuid.uuid4().hex}"


def chaos_accounts() -> list[SimAccount]:
    """Two roomy OAuth accounts and a small API-key one (its window is set in the simulator)."""
    return [
        SimAccount("roomy-a", kind="oauth", max_concurrency=3, token=_secret("a")),
        SimAccount("roomy-b", kind="oauth", max_concurrency=2, token=_secret("b")),
        SimAccount("small", kind="api_key", max_concurrency=1, token=_secret("s")),
    ]


@dataclass
class SoakConfig:
    """One soak's size and faults."""

    jobs: int = 300
    workers: int = 3
    concurrency: int = 2
    # SIGKILL a random worker ~this long (±30 %) after the fleet is whole again, then start a new one in its place.
    kill_every_s: float | None = 10.0
    redis_restarts: int = 0  # restart Redis this many times, spread over the run
    p_529: float = 0.05
    p_stall: float = 0.02
    p_drop: float = 0.02
    stall_s: float = 6.0  # longer than the idle timeout: a stall is a timeout and a retry
    small_window_s: float = 20.0
    small_window_requests: int = 5
    seed: int = 13
    warm: bool = False  # warm CLIs on (the workers' default) instead of a cold CLI per run (the e2e default)
    deadline_s: float = 900.0  # the whole run must be over by then (a bound, not a performance assertion)
    log_dir: Path = field(default_factory=Path)


@dataclass
class SoakReport:
    """What the witnesses saw. Everything under `zeros` must be 0."""

    jobs: int = 0
    wall_s: float = 0.0
    kills: int = 0
    redis_restarts: int = 0
    faults_injected: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unrecorded_runs: list[str] = field(default_factory=list)
    overlapping: list[str] = field(default_factory=list)
    over_max_attempts: list[str] = field(default_factory=list)
    usage_mismatch: list[str] = field(default_factory=list)
    usage_checked: int = 0
    usage_resent: int = 0  # jobs with a dropped stream the CLI resent: its usage omits the dropped request
    max_in_flight: dict[str, tuple[int, int]] = field(default_factory=dict)
    orphans: list[int] = field(default_factory=list)
    leaked_slots: list[str] = field(default_factory=list)
    secrets_found: list[str] = field(default_factory=list)
    #: Requests that reached the simulator but are not calls the CLI makes (the pass-through must refuse them), or
    #: that carried no account's credential (a stand-in must never leave the worker).
    forwarded_outside_allowed: list[str] = field(default_factory=list)
    upstream_unknown_credential: list[str] = field(default_factory=list)

    def over_limit(self) -> list[str]:
        """Accounts the simulator saw above their max_concurrency."""
        return [name for name, (seen, limit) in self.max_in_flight.items() if seen > limit]

    def zeros(self) -> dict[str, int]:
        """The counts that must be zero."""
        return {
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "runs not recorded as attempts": len(self.unrecorded_runs),
            "overlapping runs": len(self.overlapping),
            "over max attempts": len(self.over_max_attempts),
            "usage != simulator's": len(self.usage_mismatch),
            "accounts over their limit": len(self.over_limit()),
            "orphans": len(self.orphans),
            "leaked slots": len(self.leaked_slots),
            "secrets found": len(self.secrets_found),
            "forwarded outside the pass-through's allow-list": len(self.forwarded_outside_allowed),
            "upstream requests without an account's credential": len(self.upstream_unknown_credential),
        }

    def table(self) -> str:
        """The soak's table."""
        rows: list[tuple[str, str]] = [
            ("jobs", str(self.jobs)),
            ("wall time", f"{self.wall_s:.0f} s"),
            ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))),
            ("worker kills (SIGKILL)", str(self.kills)),
            ("Redis restarts", str(self.redis_restarts)),
            ("faults injected (529/500, drops, stalls)", str(self.faults_injected)),
            ("lost", str(len(self.lost))),
            ("duplicated", str(len(self.duplicated))),
            ("runs not recorded as attempts", str(len(self.unrecorded_runs))),
            ("overlapping runs", str(len(self.overlapping))),
            ("over max attempts", str(len(self.over_max_attempts))),
            (
                "usage = simulator's (jobs checked)",
                f"{self.usage_checked - len(self.usage_mismatch)}/{self.usage_checked}"
                f" ({self.usage_resent} with a dropped stream not compared)",
            ),
        ]
        for name, (seen, limit) in sorted(self.max_in_flight.items()):
            rows.append((f"max in flight {name} (limit)", f"{seen} ({limit})"))
        rows += [
            ("orphans (claude or worker processes left)", str(len(self.orphans))),
            ("leaked slots", str(len(self.leaked_slots))),
            ("secrets found", str(len(self.secrets_found))),
            ("forwarded outside the pass-through's allow-list", str(len(self.forwarded_outside_allowed))),
            ("upstream requests without an account's credential", str(len(self.upstream_unknown_credential))),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def problems(self) -> str:
        """The first few offenders of every nonzero count, for an assertion message."""
        parts = []
        for name, items in (
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("unrecorded", self.unrecorded_runs),
            ("overlapping", self.overlapping),
            ("over max attempts", self.over_max_attempts),
            ("usage", self.usage_mismatch),
            ("over limit", self.over_limit()),
            ("orphans", self.orphans),
            ("leaked slots", self.leaked_slots),
            ("secrets", self.secrets_found),
            ("forwarded outside the allow-list", self.forwarded_outside_allowed),
            ("upstream without an account's credential", self.upstream_unknown_credential),
        ):
            if items:
                parts.append(f"{name}: {list(items)[:5]}")
        return "; ".join(parts)


def fresh_ready(worker: WorkerProcess) -> bool:
    """Whether a worker consumes (its heartbeat is in Redis and it logged `ready.`); False while Redis is away."""
    try:
        return worker.heartbeat_fresh() and "ready." in worker.log()
    except redis.RedisError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ChaosFleet:
    """A simulator, an accounts file, N workers (each with its own /metrics port) and the background agents of
    chaos. Use as a context manager: everything it started is stopped on exit."""

    def __init__(self, config: SoakConfig, server: PrivateRedis, work_dir: Path) -> None:
        self.config = config
        self.server = server
        self.work_dir = work_dir
        self.accounts = chaos_accounts()
        self.unique = uuid.uuid4().hex[:10]
        self.rng = random.Random(config.seed)
        self.workers: list[WorkerProcess] = []
        self.all_workers: list[WorkerProcess] = []
        self.metrics_ports: dict[str, int] = {}
        self.kills = 0
        self.redis_restarts = 0
        self.submitted = 0
        self.not_terminal = 0  # as the first wait_terminal last saw it: the chaos agents pace themselves on it
        self.stop_chaos = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.sim = SimulatorServer(self._sim_config())
        self.settings: Settings | None = None
        self.redis: redis.Redis | None = None

    def _sim_config(self) -> dict[str, Any]:
        c = self.config
        accounts = []
        for account in self.accounts:
            entry: dict[str, Any] = {"name": account.name, "token": account.token_value, "kind": account.kind}
            if account.name == "small":
                entry["windows"] = [{"family": "5h", "length_s": c.small_window_s, "requests": c.small_window_requests}]
            accounts.append(entry)
        return {
            "seed": c.seed,
            "request_log_size": 100_000,
            "faults": {"p_529": c.p_529, "p_stall": c.p_stall, "stall_s": c.stall_s, "p_drop": c.p_drop},
            "latency": {"ttft_s": 0.2, "tokens_per_s": 400},
            "accounts": accounts,
        }

    def __enter__(self) -> ChaosFleet:
        self.sim.start()
        accounts_file = write_accounts_toml(self.work_dir / "accounts.toml", self.accounts, self.sim.base_url)
        self.settings = make_settings(self.server.url, self.unique, accounts_file=accounts_file, **CHAOS_SETTINGS)
        self.settings = self.settings.model_copy(
            update={"concurrency": self.config.concurrency, "warm_clients": None if self.config.warm else 0}
        )
        self.redis = redis.Redis.from_url(self.server.url)
        for _ in range(self.config.workers):
            self.workers.append(self.start_worker())
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_chaos.set()
        for thread in self.threads:
            thread.join(60)
        for worker in self.all_workers:
            if worker.alive():
                worker.kill()
        if self.redis is not None:
            self.redis.close()
        self.sim.stop()

    # --- the fleet -------------------------------------------------------------------------------------------

    def start_worker(self, wait: bool = True) -> WorkerProcess:
        assert self.settings is not None
        port = free_port()
        cfg = self.settings.model_copy(update={"metrics_port": port})
        worker = start_worker(cfg, self.accounts, self.work_dir, wait=wait, ready_timeout=120)
        self.metrics_ports[worker.worker_id] = port
        with self.lock:
            self.all_workers.append(worker)
        return worker

    def client(self) -> Client:
        assert self.settings is not None
        return Client(self.settings)

    def keys(self) -> Keys:
        assert self.settings is not None
        return Keys(self.settings.key_prefix)

    def background(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the soak: a chaos agent must not die silently
                self.errors.append(exc)

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def start_killer(self) -> None:
        """Every ~kill_every_s: SIGKILL a random live worker, start a new one in its place."""
        every = self.config.kill_every_s
        if not every:
            return

        def killer() -> None:
            # The clock runs while the fleet is whole: on a loaded machine a worker takes several seconds to start,
            # and killing the next one before its replacement consumes would leave no fleet at all. The first kill
            # comes by a quarter of the jobs finished at the latest: a quick run (warm CLIs, a quiet machine) could
            # end before the first interval does.
            first = True
            while not self._wait_chaos(every * self.rng.uniform(0.7, 1.3), 0.25 if first else None):
                first = False
                with self.lock:
                    victim = self.rng.choice(self.workers)
                victim.kill()
                self.kills += 1
                if self.stop_chaos.is_set():
                    return
                fresh = self.start_worker(wait=False)
                with self.lock:
                    self.workers[self.workers.index(victim)] = fresh
                while not self.stop_chaos.is_set() and fresh.alive() and not fresh_ready(fresh):
                    self.stop_chaos.wait(0.5)

        self.background("chaos-killer", killer)

    def _wait_chaos(self, seconds: float, by_fraction: float | None = None) -> bool:
        """Wait `seconds`, or until `by_fraction` of the jobs are terminal (None: the time alone); True when the
        chaos was stopped meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            done = 1 - self.not_terminal / self.submitted if self.submitted else 0.0
            if by_fraction is not None and done >= by_fraction:
                return self.stop_chaos.is_set()
            if self.stop_chaos.wait(min(0.25, max(0.0, end - time.monotonic()))):
                return True
        return self.stop_chaos.is_set()

    def start_redis_restarts(self, expected_s: float) -> None:
        """Restart Redis `redis_restarts` times, evenly over `expected_s` — or, on a quicker run, as the jobs finish
        (the k-th by k / (restarts + 1) of them terminal), so each restart happens while jobs still run."""
        count = self.config.redis_restarts
        if not count:
            return
        gap = expected_s / (count + 1)

        def restarter() -> None:
            started = time.monotonic()
            for k in range(1, count + 1):
                if self._wait_chaos(started + k * gap - time.monotonic(), k / (count + 1)):
                    return
                with self.lock:  # never while the killer swaps a worker (its start reads Redis)
                    self.server.restart(down_s=1.0)
                self.redis_restarts += 1

        self.background("chaos-redis", restarter)

    # --- the workload ----------------------------------------------------------------------------------------

    def marker(self, index: int) -> str:
        return f"cqjob-{self.unique}-{index:05d}"

    def submit(self, count: int) -> dict[str, str]:
        """Submit `count` jobs; -> job id by marker. Each prompt carries its marker, so the simulator's log shows
        every request of every job."""
        client = self.client()
        try:
            specs = [{"prompt": f"chaos job {self.marker(i)} answer briefly"} for i in range(count)]
            handles = client.submit_many(specs)
        finally:
            client.close()
        self.submitted += count
        self.not_terminal += count
        return {self.marker(i): h.id for i, h in enumerate(handles)}

    def wait_terminal(self, job_ids: Iterable[str], deadline: float) -> list[str]:
        """Wait until every job is terminal (or the deadline passes); -> the ids still not terminal."""
        left = list(job_ids)
        client = redis.Redis.from_url(self.server.url, socket_timeout=5, socket_connect_timeout=5)
        keys = self.keys()
        try:
            while left and time.monotonic() < deadline:
                if self.errors:
                    raise RuntimeError(f"a chaos agent failed: {self.errors[0]!r}") from self.errors[0]
                try:
                    pipe = client.pipeline(transaction=False)
                    for job_id in left:
                        pipe.hget(keys.job(job_id), "status")
                    statuses = pipe.execute()
                except redis.RedisError:
                    time.sleep(1)  # Redis is restarting
                    continue
                left = [j for j, s in zip(left, statuses, strict=True) if s is None or s.decode() not in TERMINAL]
                if not self.stop_chaos.is_set():
                    self.not_terminal = len(left)
                if left:
                    time.sleep(1)
        finally:
            client.close()
        return left

    def stop_workers(self) -> None:
        """The chaos ends; every worker gets a graceful stop (SIGKILL only past 60 s)."""
        self.stop_chaos.set()
        for thread in self.threads:
            thread.join(120)
        for worker in self.workers:
            worker.stop(timeout=60)
        for worker in self.all_workers:
            if worker.alive():
                worker.kill()

    def scrape_metrics(self) -> list[str]:
        """Every live worker's /metrics and the exporter's cluster collector output. A worker the killer killed
        just as the chaos stopped (it stops before starting the replacement) serves nothing: its counters died
        with it."""
        assert self.settings is not None and self.redis is not None
        texts = []
        for worker in self.workers:
            if not worker.alive():
                continue
            port = self.metrics_ports[worker.worker_id]
            texts.append(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
        registry = CollectorRegistry()
        registry.register(ClusterCollector(self.settings, self.redis))
        texts.append(generate_latest(registry).decode())
        return texts


# --- the witnesses -----------------------------------------------------------------------------------------------


def check_records(report: SoakReport, records: dict[str, JobRecord | None], max_attempts: int) -> None:
    """Redis: every job terminal; a success once, with its result; never over max attempts."""
    for job_id, record in records.items():
        if record is None or record.status not in TERMINAL:
            report.lost.append(job_id)
            continue
        label = record.status if record.error is None else f"{record.status} ({record.error.kind})"
        report.statuses[label] = report.statuses.get(label, 0) + 1
        successes = [a for a in record.attempts if a.outcome == "success"]
        if record.status == "succeeded" and (len(successes) != 1 or record.result is None):
            report.duplicated.append(job_id)
        if record.status != "succeeded" and successes:
            report.duplicated.append(job_id)
        counted = [a for a in record.attempts if a.outcome not in FREE_OUTCOMES]
        if len(counted) > max_attempts:
            report.over_max_attempts.append(job_id)


def check_simulator(
    report: SoakReport,
    by_marker: dict[str, str],
    records: dict[str, JobRecord | None],
    log: list[dict[str, Any]],
    billed_by_session: dict[str, dict[str, int]],
) -> None:
    """The simulator's log: no two requests of one job in flight at once; no more runs than recorded attempts;
    tokens the simulator billed to the job's sessions equal to the record's usage where every run of the job was
    recorded with its usage (a killed worker's run was not: its usage is the simulator's alone)."""
    requests: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in log:
        if entry.get("kind") != "main":
            continue
        text = " ".join(str(m.get("text", "")) for m in entry.get("messages", []))
        for word in text.split():
            if word in by_marker:
                requests[word].append(entry)
                break
    for marker, entries in requests.items():
        job_id = by_marker[marker]
        entries.sort(key=lambda e: e["time"])
        busy_until = 0.0  # the latest end of the job's requests so far (one still in flight: never)
        for entry in entries:
            if entry["time"] < busy_until:
                report.overlapping.append(job_id)
                break
            busy_until = max(busy_until, entry.get("ended", float("inf")))
        record = records.get(job_id)
        if record is None:
            continue
        sessions = {e["session_id"] for e in entries if e.get("session_id")}
        if len(sessions) > len(record.attempts):
            report.unrecorded_runs.append(job_id)
        # A stream cut mid-way is billed its input by the simulator (message_start went out), but the CLI resends
        # the request without streaming and reports only the resent one: such jobs are not comparable.
        resent = any(e.get("outcome") == "dropped" for e in entries)
        if resent:
            report.usage_resent += 1
        elif all(a.outcome not in FREE_OUTCOMES and a.usage is not None for a in record.attempts):
            report.usage_checked += 1
            billed = {"input": 0, "output": 0, "cache_read": 0, "cache_creation": 0}
            for session_id in sessions:
                for kind, count in billed_by_session.get(session_id, {}).items():
                    billed[kind] += int(count)
            usage = record.result.usage if record.result is not None else None
            if usage is None:
                usage_sum = {"input": 0, "output": 0, "cache_read": 0, "cache_creation": 0}
                for attempt in record.attempts:
                    if attempt.usage is not None:
                        usage_sum["input"] += attempt.usage.input_tokens
                        usage_sum["output"] += attempt.usage.output_tokens
                        usage_sum["cache_read"] += attempt.usage.cache_read_tokens
                        usage_sum["cache_creation"] += attempt.usage.cache_creation_tokens
            else:
                usage_sum = {
                    "input": usage.input_tokens,
                    "output": usage.output_tokens,
                    "cache_read": usage.cache_read_tokens,
                    "cache_creation": usage.cache_creation_tokens,
                }
            if usage_sum != billed:
                report.usage_mismatch.append(f"{job_id} record {usage_sum} simulator {billed}")


def check_processes(report: SoakReport, workers: list[WorkerProcess], job_ids: set[str]) -> None:
    """The process table: no worker of the fleet alive, no process started for any of its jobs."""
    report.orphans += [w.pid for w in workers if procs.alive(w.pid)]
    report.orphans += [pid for pid, job_id in procs.all_job_pids().items() if job_id in job_ids]


def check_slots(report: SoakReport, client: redis.Redis, keys: Keys, accounts: list[SimAccount]) -> None:
    """Redis: once every lease has had time to expire, no account slot is held."""
    now = time.time()
    for account in accounts:
        for member, expiry in client.zrangebyscore(keys.account_slots(account.name), now, "+inf", withscores=True):
            report.leaked_slots.append(f"{account.name}:{member.decode()} until {expiry:.0f}")


def check_secrets(report: SoakReport, secrets: list[str], blobs: Iterable[tuple[str, bytes | str]]) -> None:
    """No secret in any of the (where, text) blobs."""
    for where, blob in blobs:
        data = blob.encode() if isinstance(blob, str) else blob
        for secret in secrets:
            if secret.encode() in data:
                report.secrets_found.append(where)


def check_upstream(report: SoakReport, wire: Iterable[dict[str, Any]]) -> None:
    """What the pass-throughs forwarded upstream (the simulator's wire log, every request it received on any path):
    only calls the CLI makes (worker/passthrough/server.py `ALLOWED`), each with a configured account's credential."""
    for entry in wire:
        target = entry["path"] + ("?" + entry["query"] if entry["query"] else "")
        if refusal(entry["method"], target) is not None:
            report.forwarded_outside_allowed.append(f"#{entry['seq']} {entry['method']} {target[:80]}")
        elif entry["account"] is None:
            report.upstream_unknown_credential.append(f"#{entry['seq']} {entry['method']} {target[:80]}")


def wire_blobs(wire: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(where, text) of every request the simulator received: path, query and headers as they arrived (its wire log
    names a credential header's account instead of its value, so a token anywhere in them is one sent elsewhere)."""
    return [(f"upstream request #{e['seq']}", json.dumps(e)) for e in wire]


def redis_blobs(client: redis.Redis, prefix: str, queues: Iterable[str]) -> list[tuple[str, bytes]]:
    """(key, blob) for every key and value under `prefix` and in the broker's lists (every Redis type)."""
    keys = [*client.scan_iter(match=f"{prefix}*", count=1000)]
    for queue in queues:
        keys += [k for k in client.scan_iter(match=f"{queue}*", count=1000)]
    found: list[tuple[str, bytes]] = []
    for key in keys:
        kind = client.type(key).decode()
        blobs: list[bytes] = [key]
        if kind == "string":
            blobs.append(client.get(key) or b"")
        elif kind == "hash":
            blobs += [k + b"=" + v for k, v in client.hgetall(key).items()]
        elif kind == "list":
            blobs += client.lrange(key, 0, -1)
        elif kind == "set":
            blobs += list(client.smembers(key))
        elif kind == "zset":
            blobs += client.zrange(key, 0, -1)
        elif kind == "stream":
            blobs += [b"".join(k + v for k, v in fields.items()) for _, fields in client.xrange(key)]
        found += [(key.decode(errors="replace"), blob) for blob in blobs]
    return found


def run_soak(config: SoakConfig, server: PrivateRedis, progress: Callable[[str], None] | None = None) -> SoakReport:
    """One soak: start the fleet, submit, let chaos run until every job is terminal, stop, read the witnesses."""
    say = progress or (lambda _: None)
    report = SoakReport(jobs=config.jobs)
    started = time.monotonic()
    deadline = started + config.deadline_s
    with ChaosFleet(config, server, config.log_dir) as fleet:
        assert fleet.settings is not None and fleet.redis is not None
        by_marker = fleet.submit(config.jobs)
        job_ids = list(by_marker.values())
        say(f"submitted {len(job_ids)} jobs to {config.workers} workers")
        fleet.start_killer()
        fleet.start_redis_restarts(expected_s=max(30.0, config.jobs * 0.5))
        left = fleet.wait_terminal(job_ids, deadline)
        fleet.stop_chaos.set()
        for thread in fleet.threads:
            thread.join(120)
        if fleet.errors:
            raise RuntimeError(f"a chaos agent failed: {fleet.errors[0]!r}") from fleet.errors[0]
        say(f"chaos over after {time.monotonic() - started:.0f} s, {len(left)} jobs not terminal")
        # A job a killed worker left running is recovered by the survivors: give the last recovery its time.
        for worker in fleet.workers:
            if not worker.alive():
                continue
            try:
                worker.wait_ready(120)
            except AssertionError:
                pass
        left = fleet.wait_terminal(left, max(deadline, time.monotonic() + 60))
        metrics = fleet.scrape_metrics()
        fleet.stop_workers()
        report.wall_s = time.monotonic() - started
        report.kills = fleet.kills
        report.redis_restarts = fleet.redis_restarts

        client = fleet.client()
        try:
            records: dict[str, JobRecord | None] = {}
            for job_id in job_ids:
                try:
                    records[job_id] = client.get(job_id)
                except Exception:
                    records[job_id] = None
            max_attempts = fleet.settings.max_attempts
            check_records(report, records, max_attempts)
            log = fleet.sim.simulator.stats.requests()
            wire = fleet.sim.simulator.stats.wire_requests()
            check_upstream(report, wire)
            stats = fleet.sim.stats()
            billed = {sid: s["tokens"] for sid, s in stats["sessions"].items()}
            check_simulator(report, by_marker, records, log, billed)
            report.faults_injected = sum(
                a["errors_injected"] + a["stalls_injected"] for a in stats["accounts"].values()
            )
            for account in fleet.accounts:
                seen = stats["accounts"].get(account.name, {}).get("max_in_flight", 0)
                report.max_in_flight[account.name] = (seen, account.max_concurrency)
            check_processes(report, fleet.all_workers, set(job_ids))
            time.sleep(fleet.settings.lease_ttl_s + 1)  # slot leases of killed workers expire
            check_slots(report, fleet.redis, fleet.keys(), fleet.accounts)
            secrets = [a.token_value for a in fleet.accounts]
            events = []
            for job_id in job_ids:
                try:
                    events.append(
                        (f"events of {job_id}", json.dumps([e.model_dump(mode="json") for e in client.events(job_id)]))
                    )
                except Exception as exc:
                    events.append((f"events of {job_id}", repr(exc)))
            blobs: list[tuple[str, bytes | str]] = [
                *redis_blobs(fleet.redis, fleet.settings.key_prefix, fleet.settings.queues),
                *events,
                *((f"log of {w.worker_id}", w.log()) for w in fleet.all_workers),
                *((f"metrics {i}", text) for i, text in enumerate(metrics)),
                *((f"record {r.id}", json.dumps(r.public())) for r in records.values() if r is not None),
                *wire_blobs(wire),
            ]
            check_secrets(report, secrets, blobs)
        finally:
            client.close()
            for key in fleet.redis.scan_iter(match=f"{fleet.settings.key_prefix}*", count=1000):
                fleet.redis.delete(key)
    return report
