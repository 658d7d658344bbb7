"""The run sandbox's cost: short read-only jobs with a `cwd`, sandboxed (`CLAUDEQ_POLICY__SANDBOX=bwrap`) against
not (`off`), in one run. Real Redis, two real `claudeq-worker` processes (one per way, both as this process's user,
so on a root machine both run their CLIs under run uids: the sandbox is the only difference), the real CLI, the
simulator in a process of its own, the pass-through on.

`--rounds` batches of `--jobs` jobs per way, interleaved in a rotating order (a busy machine's load drifts over the
run). Per way: the throughput of a batch (submit -> the last job seen finished), median over the rounds; the CLI's
start, per job, from its `run_started` event to its first event from the CLI (the simulator answers at once, so
this is the CLI's start and one model round trip), p50; the CPU per job of the worker process and the CLIs it
reaped. Both workers first run a batch of `--lanes` jobs that is not measured.

    .venv/bin/python -m bench.bench_sandbox [--jobs 12] [--rounds 3] [--lanes 2]
    .venv/bin/python -m bench.bench_sandbox --cli-start 30   # the CLI's start alone: plain, bwrap, Landlock
    .venv/bin/python -m bench.bench_sandbox --density 20     # memory of 20 runs held open at once, each way
    .venv/bin/python -m bench.bench_sandbox --warm-trade     # workers not root, warm CLIs on: sandboxed vs off

`--density N`: one worker per way with `--concurrency N` submits N read-only jobs whose model call the simulator
stalls (`[[sim: stall S]]`), waits until the simulator holds all N requests open (every CLI started and waiting),
then sums the proportional set size (`Pss` of `/proc/<pid>/smaps_rollup`) of every process under the worker — the
wrapper, bwrap, socat, the CLI and its children — three samples a few seconds apart, median; the ways one after the
other in the same run, so no way's CLIs share pages with the other's. Per run: that sum / N; the ratio
sandboxed/not; and runs per 24 GiB at that figure. The worker's own PSS growth per held run is printed beside it.

`--warm-trade`: what the sandbox costs the jobs that run warm. Both workers run as a uid that is not root (there a
read-only job runs under the worker's uid, so it may reuse a warm CLI), both with warm CLIs on: one with
`CLAUDEQ_POLICY__SANDBOX=bwrap` (its warm CLIs kept in their sandboxes), one with `off`; the same rounds and figures
as the default mode.

Target: sandboxed / not >= 0.95x throughput; density: PSS per run sandboxed / not <= 1.1x.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil
import redis

from bench.bench_warm import Cell, process_cpu, through_claudeq
from claudeq.config.settings import WorkerPolicy
from claudeq.models import JobSpec
from claudeq.producer.client import Client, JobHandle
from claudeq.simulator.testing import start_simulator_process
from claudeq.worker.run.launcher import bundled_cli
from claudeq.worker.run.sandbox import SandboxView
from tests.conftest import USED, make_settings, sweep
from tests.support.redis_server import redis_url_for_tests
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

WORKSPACE_GID = 62599
WORKER_UID = 62998  # --warm-trade's workers (outside the run uids and the groups)
TARGET = 0.95
DENSITY_TARGET = 1.1
HOST_BYTES = 24 * 2**30


class ReadOnlyClient(Client):
    """A client whose jobs ask for the read-only profile in the workspace (what a sandboxed run is)."""

    workspace = ""
    submitted: list[str]

    def submit(self, spec: JobSpec | dict[str, Any] | None = None, **fields: Any) -> JobHandle:
        handle = super().submit(spec, **{**fields, "tools": "read-only", "cwd": self.workspace})
        self.submitted.append(handle.id)
        return handle


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuMeter:
    """CPU seconds of a worker and every process it starts. A sandbox's processes are not reaped by the worker (bwrap
    reports its child's exit through a pipe, without a wait), so their CPU never reaches its rusage: a cpuacct
    cgroup of its own counts them, where the host has one; else the rusage (and the sandboxed figure is low)."""

    def __init__(self, pid: int, name: str) -> None:
        self.pid = pid
        self.group: Path | None = CPUACCT / name
        try:
            self.group.mkdir()
            (self.group / "cgroup.procs").write_text(str(pid))
        except OSError:
            self.group = None

    def seconds(self) -> float:
        if self.group is None:
            return process_cpu(self.pid)
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        if self.group is not None:
            with contextlib.suppress(OSError):
                (CPUACCT / "cgroup.procs").write_text(str(self.pid))
            with contextlib.suppress(OSError):
                self.group.rmdir()


def warm_runs(client: Client, job_ids: list[str]) -> list[bool]:
    """Per job: whether it ran on a warm CLI (its `run_started` event says so)."""
    return [any(e.type == "run_started" and e.data.get("warm") for e in client.events(j)) for j in job_ids]


def cli_starts(client: Client, job_ids: list[str]) -> list[float]:
    """Per job: seconds from `run_started` to the first event the CLI's output made."""
    starts: list[float] = []
    for job_id in job_ids:
        events = client.events(job_id)
        began = next((e.at for e in events if e.type == "run_started"), None)
        after = next((e.at for e in events if began is not None and e.at > began and e.type != "run_started"), None)
        if began is not None and after is not None:
            starts.append((after - began).total_seconds())
    return starts


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_FS_ALL = (1 << 16) - 1  # every filesystem right of Landlock ABI 5 and later
_FS_READ = 1 | 4 | 8  # execute, read file, read directory
_FILE_RIGHTS = 1 | 2 | 4 | 1 << 14 | 1 << 15  # the rights a rule on a file (not a directory) may hold


def landlock(read: list[str], write: list[str]) -> None:
    """Restrict this process (a child before its exec) to reading `read` and writing `write`, with Landlock."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _Ruleset(_FS_ALL, 0, 0)
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)  # landlock_create_ruleset
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for path, allowed in [*((p, _FS_READ) for p in read), *((p, _FS_ALL) for p in write)]:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = _Beneath(allowed if os.path.isdir(path) else allowed & _FILE_RIGHTS, fd)
        if libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) != 0:  # landlock_add_rule, path beneath
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # no_new_privs, restrict_self
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")


def cli_start(rounds: int) -> int:
    """`claude --version` plain, in the run's bubblewrap sandbox and under Landlock, interleaved: the start cost of
    each mechanism alone (no worker, no model call)."""
    cli = bundled_cli()
    with tempfile.TemporaryDirectory(prefix="claudeq-bench-start-") as tmp:
        run_dir = Path(tmp)
        view = SandboxView(cli=cli, run_dir=run_dir, cwd=run_dir)
        commands: dict[str, tuple[list[str], Callable[[], None] | None]] = {
            "plain": ([str(cli), "--version"], None),
            "bwrap": (["bwrap", *view.args(), str(cli), "--version"], None),
            "landlock": (
                [str(cli), "--version"],
                lambda: landlock(["/usr", "/etc", "/proc", "/dev", "/sys", str(cli)], [tmp, "/dev/null"]),
            ),
        }
        times: dict[str, list[float]] = {way: [] for way in commands}
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp}
        for round_ in range(rounds):
            ways = list(commands)
            for way in ways[round_ % 3 :] + ways[: round_ % 3]:
                command, before = commands[way]
                started = time.perf_counter()
                done = subprocess.run(command, preexec_fn=before, capture_output=True, env=env, check=False)
                times[way].append(time.perf_counter() - started)
                if done.returncode != 0:
                    raise RuntimeError(f"{way}: {done.stderr.decode(errors='replace')[-300:]}")
    plain = statistics.median(times["plain"])
    print(f"claude --version, {rounds} rounds interleaved, load average {os.getloadavg()[0]:.2f} (1 min):")
    for way, values in times.items():
        median = statistics.median(values)
        print(
            f"  {way:9s} p50 {median * 1000:6.0f} ms  ({median / plain:.2f}x plain, +{(median - plain) * 1000:.0f} ms)"
        )
    return 0


def not_root(root: Path) -> tuple[list[str], dict[str, str]]:
    """The prefix that starts a worker as WORKER_UID in the workspace's group, and its HOME. CAP_DAC_READ_SEARCH only
    so that it can load this checkout's interpreter; the wrapper hands no capability on to the CLI."""
    home = root / "worker-home"
    home.mkdir(mode=0o700)
    os.chown(home, WORKER_UID, WORKER_UID)
    prefix = [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={WORKER_UID}",
        f"--regid={WORKER_UID}",
        f"--groups={WORKSPACE_GID}",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]
    return prefix, {"HOME": str(home)}


def pss(pid: int) -> int:
    """A process's proportional set size in bytes (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    line = next((raw for raw in text.splitlines() if raw.startswith("Pss:")), "Pss: 0 kB")
    return int(line.split()[1]) * 1024


def tree_pss(pid: int) -> tuple[int, int, dict[str, list[int]]]:
    """(the process's own PSS, the PSS of all its descendants, descendants' PSS by process name)."""
    by_name: dict[str, list[int]] = {}
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0, by_name
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            by_name.setdefault(child.name(), []).append(pss(child.pid))
    return pss(pid), sum(sum(v) for v in by_name.values()), by_name


def in_flight(sim_url: str) -> int:
    """Requests the simulator holds open."""
    return int(httpx.get(f"{sim_url}/_sim/stats", timeout=10).json()["totals"]["in_flight"])


def density(n_runs: int, stall_s: float) -> int:
    """N runs held open at once, sandboxed then not, in one run: PSS per run of each way's process trees."""
    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=2 * n_runs)
    prefixes: list[str] = []
    figures: dict[str, tuple[float, float, dict[str, list[int]]]] = {}
    load_before = os.getloadavg()
    with open_base("claudeq-bench-density-") as root:
        workspace = group_workspace(root / "ws", WORKSPACE_GID)
        sim_config = root / "sim.toml"
        sim_config.write_text(f'[[accounts]]\nname = "{account.name}"\ntoken = "{account.token_value}"\n')
        sim_proc, sim_url = start_simulator_process(sim_config)
        workers = []
        try:
            accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim_url)
            setups: list[tuple[str, Literal["bwrap", "off"]]] = [("sandboxed", "bwrap"), ("unsandboxed", "off")]
            for way, sandbox in setups:
                policy = WorkerPolicy(workspace_roots=[workspace], run_groups=[WORKSPACE_GID], sandbox=sandbox)
                settings = make_settings(
                    url,
                    f"{unique}-{way}",
                    accounts_file=accounts_file,
                    concurrency=n_runs,
                    warm_clients=0,
                    run_root=root / f"runs-{way}",
                    policy=policy,
                )
                prefixes.append(settings.key_prefix)
                worker = start_worker(settings, [account], Path(tempfile.gettempdir()), worker_id=f"bench-{way}")
                workers.append(worker)
                client = ReadOnlyClient(settings)
                client.workspace = str(workspace)
                client.submitted = []
                through_claudeq(client, 2, f"{way}-prime")
                idle_own, idle_tree, _ = tree_pss(worker.pid)
                ids = [client.submit(prompt=f"[[sim: stall {stall_s:g}]] density {way} {n}").id for n in range(n_runs)]
                deadline = time.monotonic() + stall_s / 2
                while in_flight(sim_url) < n_runs:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{way}: only {in_flight(sim_url)} of {n_runs} runs reached the model")
                    time.sleep(1)
                time.sleep(3)
                samples = []
                for _ in range(3):
                    samples.append(tree_pss(worker.pid))
                    time.sleep(2)
                own, tree, by_name = sorted(samples, key=lambda sample: sample[1])[1]
                figures[way] = ((tree - idle_tree) / n_runs, (own - idle_own) / n_runs, by_name)
                print(f"  {way}: {sum(len(v) for v in by_name.values())} processes held, load {os.getloadavg()[0]:.2f}")
                for job_id in ids:
                    client.cancel(job_id, "density measured")
                deadline = time.monotonic() + 120
                while in_flight(sim_url) > 0 and time.monotonic() < deadline:
                    time.sleep(1)
                stop_all([worker])
        finally:
            stop_all(workers)
            sim_proc.terminate()
            sim_proc.wait(10)
            cleanup = redis.Redis.from_url(url)
            for prefix in prefixes:
                for key in cleanup.scan_iter(match=f"{prefix}*", count=1000):
                    cleanup.delete(key)
            cleanup.close()
            if private is not None:
                private.stop()
    load_after = os.getloadavg()

    mib = 2**20
    print(f"{n_runs} read-only runs with a cwd held open at once per way (simulator stall {stall_s:g} s)")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(f"{'':12s} {'PSS/run (MiB)':>14} {'worker/run (MiB)':>17} {'runs per 24 GiB':>16}  by process (MiB each)")
    for way, (per_run, worker_per_run, by_name) in figures.items():
        parts = ", ".join(
            f"{name} {len(values)}x {statistics.median(values) / mib:.1f}" for name, values in sorted(by_name.items())
        )
        print(
            f"{way:12s} {per_run / mib:>14.1f} {worker_per_run / mib:>17.2f} "
            f"{HOST_BYTES / (per_run + worker_per_run):>16.0f}  {parts}"
        )
    ratio = figures["sandboxed"][0] / figures["unsandboxed"][0]
    print(f"PSS per run sandboxed / unsandboxed: {ratio:.2f}x")
    print(f"density target <= {DENSITY_TARGET:.2f}x: {'met' if ratio <= DENSITY_TARGET else 'MISSED'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run both ways in interleaved rounds and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12, help="jobs per batch")
    parser.add_argument("--rounds", type=int, default=3, help="batches of each way, interleaved")
    parser.add_argument("--lanes", type=int, default=2, help="runs in flight per worker")
    parser.add_argument(
        "--cli-start", type=int, metavar="ROUNDS", help="only time the CLI's start: plain, bwrap and Landlock"
    )
    parser.add_argument("--density", type=int, metavar="RUNS", help="only the memory of RUNS runs held open, each way")
    parser.add_argument("--stall", type=float, default=240, help="seconds the simulator holds each --density run")
    parser.add_argument(
        "--warm-trade", action="store_true", help="workers not root, warm CLIs on: sandboxed against the sandbox off"
    )
    args = parser.parse_args(argv)
    if args.density:
        return density(args.density, args.stall)
    if args.cli_start:
        return cli_start(args.cli_start)

    url, private = redis_url_for_tests()
    unique = uuid.uuid4().hex[:10]
    account = SimAccount("bench", max_concurrency=4 * args.lanes)
    cells: dict[str, Cell] = {}
    starts: dict[str, list[float]] = {}
    warm: dict[str, list[bool]] = {}
    prefixes: list[str] = []
    load_before = os.getloadavg()
    with open_base("claudeq-bench-sandbox-") as root:
        workspace = group_workspace(root / "ws", WORKSPACE_GID)
        (workspace / "note.txt").write_text("a note\n")
        sim_config = root / "sim.toml"
        sim_config.write_text(f'[[accounts]]\nname = "{account.name}"\ntoken = "{account.token_value}"\n')
        sim_proc, sim_url = start_simulator_process(sim_config)
        workers = []
        meters: dict[str, CpuMeter] = {}
        try:
            accounts_file = write_accounts_toml(root / "accounts.toml", [account], sim_url)
            clients: dict[str, ReadOnlyClient] = {}
            setups: list[tuple[str, Literal["bwrap", "off"]]] = [("sandboxed", "bwrap"), ("unsandboxed", "off")]
            prefix, extra_env = not_root(root) if args.warm_trade else ([], {})
            for way, sandbox in setups:
                policy = WorkerPolicy(workspace_roots=[workspace], run_groups=[WORKSPACE_GID], sandbox=sandbox)
                run_root = root / f"runs-{way}"
                if args.warm_trade:
                    run_root.mkdir()
                    os.chown(run_root, WORKER_UID, WORKER_UID)
                settings = make_settings(
                    url,
                    f"{unique}-{way}",
                    accounts_file=accounts_file,
                    concurrency=args.lanes,
                    warm_clients=args.lanes if args.warm_trade else 0,
                    run_root=run_root,
                    policy=policy,
                )
                prefixes.append(settings.key_prefix)
                workers.append(
                    start_worker(
                        settings,
                        [account],
                        Path(tempfile.gettempdir()),
                        worker_id=f"bench-{way}",
                        prefix=prefix,
                        extra_env=extra_env,
                    )
                )
                meters[way] = CpuMeter(workers[-1].pid, f"claudeq-bench-sandbox-{unique}-{way}")
                clients[way] = ReadOnlyClient(settings)
                clients[way].workspace = str(workspace)
                clients[way].submitted = []
                through_claudeq(clients[way], args.lanes, f"{way}-prime")
            ways = list(clients)
            for round_ in range(args.rounds):
                for way in ways[round_ % 2 :] + ways[: round_ % 2]:
                    tag = f"{way}-{round_}"
                    cpu_before = meters[way].seconds()
                    clients[way].submitted = []
                    elapsed, _ = through_claudeq(clients[way], args.jobs, tag)
                    cell = cells.setdefault(way, Cell())
                    cell.cpu.append((meters[way].seconds() - cpu_before) / args.jobs)
                    cell.batches.append(elapsed)
                    starts.setdefault(way, []).extend(cli_starts(clients[way], clients[way].submitted))
                    warm.setdefault(way, []).extend(warm_runs(clients[way], clients[way].submitted))
                    print(f"  round {round_} {way:11s}: {elapsed:.2f} s", flush=True)
        finally:
            stop_all(workers)
            for meter in meters.values():
                meter.close()
            sim_proc.terminate()
            sim_proc.wait(10)
            cleanup = redis.Redis.from_url(url)
            for prefix in prefixes:
                for key in cleanup.scan_iter(match=f"{prefix}*", count=1000):
                    cleanup.delete(key)
            cleanup.close()
            if private is not None:
                private.stop()
    load_after = os.getloadavg()

    boxed, plain = cells["sandboxed"], cells["unsandboxed"]
    print(f"jobs per batch={args.jobs} rounds={args.rounds} lanes={args.lanes} (read-only jobs with a cwd)")
    if args.warm_trade:
        print("workers not root, warm CLIs on in both")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    counted = "a cpuacct cgroup per worker" if all(m.group for m in meters.values()) else "rusage (sandboxes uncounted)"
    print(f"CPU per job counted by {counted}")
    print(f"{'':12s} {'jobs/s':>7} {'CLI start p50 (ms)':>19} {'CPU/job (ms)':>13} {'warm':>6}")
    for way, cell in (("sandboxed", boxed), ("unsandboxed", plain)):
        print(
            f"{way:12s} {cell.rate(args.jobs):>7.2f} {statistics.median(starts[way]) * 1000:>19.0f} "
            f"{statistics.median(cell.cpu) * 1000:>13.0f} {sum(warm[way]):>3}/{len(warm[way])}"
        )
    throughput = boxed.rate(args.jobs) / plain.rate(args.jobs)
    start_ratio = statistics.median(starts["sandboxed"]) / statistics.median(starts["unsandboxed"])
    cpu_ratio = statistics.median(boxed.cpu) / statistics.median(plain.cpu)
    ratios = f"throughput {throughput:.2f}x, CLI start p50 {start_ratio:.2f}x, CPU/job {cpu_ratio:.2f}x"
    print(f"sandboxed / unsandboxed: {ratios}")
    print(f"throughput target >= {TARGET:.2f}x: {'met' if throughput >= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        sweep(USED)
