"""What real jobs weigh in Redis: a job mix that looks like real work, through a real `claudeq-worker`, the real CLI
and the simulator, on a private Redis; the same mix under each configuration in the same run.

The mix (per configuration, `--each` of every kind): one-line answers; tool-heavy read-only reviews (the CLI reads
six source files of the worker, tens of KB each, ~160 KB, globs, and answers in 1,500 tokens); long answers (6,000
tokens); a job whose first attempt fails (a 500) and is retried; one conversation of three turns.

The configurations: `main` is today's main (transcripts stored one JSON text per entry, the session retention for
every transcript, tool results of 4,000 characters in events: `session_codec=none`, `event_tool_result_chars=4000`);
`compact` is the defaults (each append batch compressed with `--codec`, Read results stored once, tool results of
1,000 characters in events); `compact, one-shot 0` also deletes a one-shot job's transcript at its success
(`oneshot_session_ttl_s=0`); `compact, archived` is the defaults with the transcript archive on PostgreSQL
(`--archive-url`, the machine's by default) moving at once (`archive_after_s=0`), weighed once everything moved.

Printed: Redis bytes per finished job by key family (the record without its events; the record's compacted events;
the transcript: the session's list, uuids (`ids`), summary, subkeys; the session's own indexes: `session-projects`,
`session-tenant`; the keys every job has an entry in — `jobs`, `sessions:{project}`, counters — divided among the
jobs; a conversation's own keys divided among its turns; the accounts' and workers' keys are listed apart) per
kind of job and configuration, with the ratio to `main`; per queued job; what the same jobs' raw transcripts (the
JSON of their entries) and tool outputs weigh; zstd against zlib on these transcripts, batch by batch as appended
(size and CPU); the CPU compression costs per job.

    .venv/bin/python -m bench.bench_weight [--each 2] [--codec zlib]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.jobs import pack_events, unpack_events
from claudeq.keys import Keys, key_part
from claudeq.producer.client import Client
from claudeq.simulator.testing import SimulatorServer
from claudeq.transcripts import decode, without_copies
from tests.conftest import make_settings
from tests.support.archive import POSTGRES_URL
from tests.support.redis_server import PrivateRedis
from tests.support.worker_proc import FAST_E2E, SimAccount, start_worker, stop_all, write_accounts_toml

ROOT = Path(__file__).resolve().parent.parent
#: Six source files of the worker, ~160 KB: what a read-only review of it reads.
REVIEWED = ["handler.py", "engine.py", "runner.py", "warm.py", "job_store.py", "session_planner.py"]
WORKSPACE_GID = 62502  # the runs' shared group (as the e2e tests'): a root worker may run file tools as another uid

CONFIGS: dict[str, dict[str, Any]] = {
    "main": {"session_codec": "none", "event_tool_result_chars": 4000, "event_codec": "none"},
    "compact": {},
    "compact, one-shot 0": {"oneshot_session_ttl_s": 0},
    # The defaults plus the transcript archive on the machine's PostgreSQL, moving at once (archive_after_s=0):
    # weighed once every job's events and sessions have moved.
    "compact, archived": {"archive_after_s": 0},
}
KINDS = ["one-line", "tool-heavy", "long answer", "retried", "conversation turn"]


def prompts(kind: str, n: int, workspace: Path, tag: str) -> dict[str, Any]:
    """The spec fields of job `n` of `kind`."""
    if kind == "one-line":
        return {"prompt": f'[[sim: text "ok"]] one-line {tag}-{n}'}
    if kind == "tool-heavy":
        reads = " ".join(f"[[sim: tool Read {json.dumps({'file_path': str(workspace / name)})}]]" for name in REVIEWED)
        # The simulator's final text quotes the last tool result: a small Glob last keeps the answer the 1,500
        # tokens asked for, as a model's review would be, instead of a copy of the last file.
        glob = f"[[sim: tool Glob {json.dumps({'pattern': '*.md'})}]]"
        return {
            "prompt": f"{reads} {glob} [[sim: tokens out=1500]] review the worker {tag}-{n}",
            "tools": "read-only",
            "cwd": str(workspace),
        }
    if kind == "long answer":
        return {"prompt": f"[[sim: tokens out=6000]] write it up {tag}-{n}"}
    if kind == "retried":
        return {"prompt": f"[[sim: error 500 times=1]] [[sim: tokens out=200]] flaky {tag}-{n}"}
    raise ValueError(kind)


def make_workspace() -> tuple[Path, Path]:
    """(base to remove, workspace) holding copies of the reviewed files, reachable by a run under its own uid."""
    base = Path(tempfile.mkdtemp(prefix="cq-weight-", dir="/tmp"))
    base.chmod(0o711)
    ws = base / "ws"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 0, WORKSPACE_GID)
        ws.chmod(0o2770)
    for name in REVIEWED:
        target = ws / name
        shutil.copy(ROOT / "worker" / name, target)
        target.chmod(0o644)
    return base, ws


def run_mix(client: Client, each: int, workspace: Path, tag: str) -> dict[str, list[str]]:
    """Submit the mix, wait for every job; -> job ids per kind."""
    ids: dict[str, list[str]] = defaultdict(list)
    for kind in KINDS[:-1]:
        for n in range(each):
            ids[kind].append(client.submit(**prompts(kind, n, workspace, tag)).id)
    conversation = f"conv-{tag}"
    for turn in range(3):  # turns run one after another: the second resumes the first's session
        text = "[[sim: tokens out=300]]" if turn else '[[sim: text "noted"]]'
        ids["conversation turn"].append(client.submit(prompt=f"{text} turn {turn} {tag}", conversation=conversation).id)
    for kind, job_ids in ids.items():
        for job_id in job_ids:
            record = client.wait(job_id, timeout=300, poll_s=0.2)
            if record.status != "succeeded":
                raise RuntimeError(f"{kind} job {job_id} {record.status}: {record.error}")
    return ids


def usage(r: redis.Redis, key: str) -> int:
    return int(r.memory_usage(key, samples=0) or 0)


def weigh(
    r: redis.Redis, client: Client, keys: Keys, ids: dict[str, list[str]], dump: Path | None = None
) -> dict[str, Any]:
    """Per kind: mean bytes per job by family; the raw transcript and tool output bytes; the stored batches."""
    all_keys = {k.decode() for k in r.scan_iter(match=f"{keys.prefix}*", count=1000)}
    owned: set[str] = set()
    per_kind: dict[str, dict[str, float]] = {}
    batches: dict[str, list[list[Any]]] = defaultdict(list)
    raw_by_kind: dict[str, dict[str, float]] = {}
    record_fields: dict[str, dict[str, int]] = {}
    events_cpu: dict[str, float] = {}
    session_prefix = f"{keys.prefix}session:"
    for kind, job_ids in ids.items():
        sums: dict[str, float] = defaultdict(float)
        raw: dict[str, float] = defaultdict(float)
        for job_id in job_ids:
            job_key = keys.job(job_id)
            owned.add(job_key)
            events_len = int(r.hstrlen(job_key, "events"))
            if dump is not None:
                fields = {f.decode(): v.decode(errors="replace") for f, v in r.hgetall(job_key).items()}
                (dump / f"{kind}-{job_id}-record.json").write_text(json.dumps(fields, indent=1))
            sums["record"] += usage(r, job_key) - events_len
            sums["events"] += events_len
            sessions = {
                str(e.data["session_id"])
                for e in client.events(job_id)
                if e.type == "session" and e.data.get("session_id")
            }
            for sid in sessions:
                part = key_part(sid)
                mine = {k for k in all_keys if k.startswith(session_prefix) and f":{part}:" in k}
                for name in mine:
                    size = usage(r, name)
                    sums["transcript"] += size
                    tail = name.rsplit(":", 1)[-1]
                    is_list = tail == "main" or (":sub:" in name and tail not in ("uuids", "ids"))
                    sums["  list" if is_list else f"  {tail}"] += size
                    if is_list:
                        elements = r.lrange(name, 0, -1)
                        if dump is not None:
                            (dump / f"{kind}-{job_id}-{sid}.json").write_text(json.dumps(decode(elements), indent=1))
                        for element in elements:
                            batch = decode([element])
                            batches[kind].append(batch)
                            raw["transcript JSON"] += sum(len(json.dumps(x, separators=(",", ":"))) for x in batch)
                            raw["tool outputs"] += tool_output_bytes(batch)
                index_keys = {keys.session_projects(sid), keys.session_tenant(sid)}
                for name in index_keys & all_keys:
                    sums["session indexes"] += usage(r, name)
                owned |= mine | index_keys
        plain = [unpack_events(r.hget(keys.job(j), "events")) for j in job_ids]
        plain = [p for p in plain if isinstance(p, bytes)]
        t0 = time.process_time()
        for _ in range(5):
            for p in plain:
                pack_events(p)
        events_cpu[kind] = (time.process_time() - t0) / 5 * 1000 / len(job_ids)
        fields = {f.decode(): int(r.hstrlen(keys.job(job_ids[0]), f)) for f in r.hkeys(keys.job(job_ids[0]))}
        record_fields[kind] = dict(sorted(fields.items(), key=lambda kv: -kv[1])[:6])
        per_kind[kind] = {f: v / len(job_ids) for f, v in sums.items()}
        raw_by_kind[kind] = {f: v / len(job_ids) for f, v in raw.items()}
    rest = {k[len(keys.prefix) :]: usage(r, k) for k in all_keys - owned}
    # Keys every job has an entry in (divided among the jobs); a conversation's own keys (divided among its turns);
    # the rest (accounts, workers) is the fleet's whatever the number of jobs: listed, not counted per job.
    per_job = {k: v for k, v in rest.items() if k.split(":", 1)[0] in ("jobs", "sessions", "counts", "tenant")}
    conversation = {k: v for k, v in rest.items() if k.startswith("conv")}
    fleet = {k: v for k, v in rest.items() if k not in per_job and k not in conversation}
    n_jobs = sum(len(v) for v in ids.values())
    for kind in per_kind:
        per_kind[kind]["shared indexes"] = sum(per_job.values()) / n_jobs
        if kind == "conversation turn":
            per_kind[kind]["conversation keys"] = sum(conversation.values()) / len(ids[kind])
        per_kind[kind]["total"] = sum(v for f, v in per_kind[kind].items() if f != "total" and not f.startswith(" "))
    return {
        "per_kind": per_kind,
        "raw": raw_by_kind,
        "batches": batches,
        "fields": record_fields,
        "fleet": fleet,
        "events_cpu": events_cpu,
    }


def tool_output_bytes(batch: list[Any]) -> int:
    """Bytes of tool output in these entries: each tool_result block's content, and `toolUseResult` beside it."""
    total = 0
    for entry in batch:
        message = entry.get("message") if isinstance(entry, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    total += len(json.dumps(block.get("content"), ensure_ascii=False))
        if isinstance(entry, dict) and "toolUseResult" in entry:
            total += len(json.dumps(entry["toolUseResult"], ensure_ascii=False))
    return total


def queued_weight(r: redis.Redis, settings: Settings, n: int = 20) -> float:
    """Redis bytes per queued job (record, indexes, broker message): `n` jobs submitted with no worker."""
    before = int(r.info("memory")["used_memory"])
    client = Client(settings)
    for i in range(n):
        client.submit(prompt=f'[[sim: text "ok"]] queued {i}')
    after = int(r.info("memory")["used_memory"])
    return (after - before) / n


def codecs(batches: list[list[Any]]) -> list[tuple[str, int, float, float]]:
    """(codec, stored bytes, compress ms, decompress ms) over every batch as it was appended."""
    import zstandard

    plain = sum(len(json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode()) for b in batches)
    raws = [json.dumps(without_copies(b), separators=(",", ":"), ensure_ascii=False).encode() for b in batches]
    out: list[tuple[str, int, float, float]] = [("none (JSON)", plain, 0.0, 0.0)]
    out.append(("one copy", sum(len(x) for x in raws), 0.0, 0.0))
    cases: list[tuple[str, Any, Any]] = []
    for level in (1, 3, 6, 9, 12, 19):
        c = zstandard.ZstdCompressor(level=level)
        cases.append((f"zstd -{level}", c.compress, zstandard.ZstdDecompressor().decompress))
    for level in (1, 6, 9):
        cases.append((f"zlib -{level}", lambda x, lv=level: zlib.compress(x, lv), zlib.decompress))
    for name, comp, decomp in cases:
        t0 = time.process_time()
        for _ in range(3):
            blobs = [comp(x) for x in raws]
        t1 = time.process_time()
        for _ in range(3):
            for b in blobs:
                decomp(b)
        t2 = time.process_time()
        out.append((name, sum(len(b) for b in blobs), (t1 - t0) / 3 * 1000, (t2 - t1) / 3 * 1000))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--each", type=int, default=2, help="jobs of every kind per configuration")
    parser.add_argument("--codec", default="zstd", choices=["zstd", "zlib"])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--archive-url", default=POSTGRES_URL, help="the archive of the `compact, archived` configuration"
    )
    parser.add_argument("--dump", type=Path, help="write every job's record and transcript (JSON) under this folder")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    server = PrivateRedis()
    r = redis.Redis.from_url(server.url)
    account = SimAccount("bench", max_concurrency=args.concurrency)
    base, workspace = make_workspace()
    results: dict[str, dict[str, Any]] = {}
    queued: dict[str, float] = {}
    archived: dict[str, dict[str, float]] = {}
    try:
        with SimulatorServer({"accounts": [{"name": account.name, "token": account.token_value}]}) as sim:
            accounts_file = write_accounts_toml(base / "accounts.toml", [account], sim.base_url)
            policy = WorkerPolicy(workspace_roots=[workspace], run_groups=[WORKSPACE_GID])
            for n, (name, overrides) in enumerate(CONFIGS.items()):
                tag = f"w{n}{uuid.uuid4().hex[:6]}"
                if name != "main":
                    overrides = {"session_codec": args.codec, **overrides}
                if "archive_after_s" in overrides:
                    overrides = {**overrides, "archive_url": args.archive_url}
                settings = make_settings(
                    server.url,
                    tag,
                    accounts_file=accounts_file,
                    policy=policy,
                    **{**FAST_E2E, "concurrency": args.concurrency, **overrides},
                )
                queued[name] = queued_weight(r, make_settings(server.url, tag + "q", **overrides))
                worker = start_worker(settings, [account], base)
                try:
                    client = Client(settings)
                    ids = run_mix(client, args.each, workspace, tag)
                    time.sleep(1.0)  # the last finish's bookkeeping (one-shot retention) lands
                    if settings.archive_url:
                        archived[name] = wait_archived(r, Keys(settings.key_prefix), ids, settings.archive_url)
                    dump = None
                    if args.dump is not None:
                        dump = args.dump / name.replace(", ", "-").replace(" ", "")
                        dump.mkdir(parents=True, exist_ok=True)
                    results[name] = weigh(r, client, Keys(settings.key_prefix), ids, dump)
                finally:
                    stop_all([worker])
    finally:
        r.close()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    finished = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    report(args, started, finished, results, queued, archived)
    return 0


def wait_archived(r: redis.Redis, keys: Keys, ids: dict[str, list[str]], url: str) -> dict[str, float]:
    """Wait until the archiver moved every job's events and sessions; -> archive bytes per job (elements, events),
    read from the archive's tables (then this run's rows are deleted)."""
    from claudeq.archive import open_archive

    every = [j for job_ids in ids.values() for j in job_ids]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pending = [j for j in every if r.hget(keys.job(j), "archived") != b"1"]
        session_lists = [k for k in r.scan_iter(match=f"{keys.prefix}session:*", count=1000) if k.endswith(b":main")]
        if not pending and not session_lists and not r.zcard(keys.archive_due):
            break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"the archiver did not move everything in 120 s: {len(pending)} jobs left")
    time.sleep(1.0)  # the last move's Redis transaction lands
    archive = open_archive(url)
    assert archive is not None
    with archive._tx() as cur:
        cur.execute(
            "SELECT COALESCE(SUM(LENGTH(element)), 0) FROM claudeq_transcript_elements WHERE prefix = ?", (keys.prefix,)
        )
        elements = int(cur.fetchone()[0])
        cur.execute(
            "SELECT COALESCE(SUM(LENGTH(events)) + SUM(LENGTH(result)), 0) FROM claudeq_job_history WHERE prefix = ?",
            (keys.prefix,),
        )
        events = int(cur.fetchone()[0])
    archive.drop(keys.prefix)
    return {"transcripts": elements / len(every), "events": events / len(every)}


def report(
    args: argparse.Namespace,
    started: str,
    finished: str,
    results: dict[str, dict[str, Any]],
    queued: dict[str, float],
    archived: dict[str, dict[str, float]],
) -> None:
    print(
        f"bench_weight: {started} -> {finished}; --each {args.each} --codec {args.codec}; load {os.getloadavg()[0]:.1f}"
    )
    families = ["record", "events", "transcript", "  list", "  ids", "  uuids", "  summary", "session indexes"]
    families += ["shared indexes", "conversation keys", "total"]
    base = results["main"]["per_kind"]
    for kind in KINDS:
        print(f"\n{kind}: Redis bytes per finished job (ratio to main)")
        print(f"  {'family':18}" + "".join(f"{c:>24}" for c in CONFIGS))
        for family in families:
            row = f"  {family:18}"
            for config in CONFIGS:
                value = results[config]["per_kind"][kind].get(family, 0.0)
                ref = base[kind].get(family, 0.0)
                ratio = f" ({value / ref:.2f}x)" if ref else ""
                row += f"{value:>14,.0f}{ratio:>10}"
            print(row)
        largest = ", ".join(f"{f} {n:,}" for f, n in results["compact"]["fields"][kind].items())
        print(f"  largest record fields (compact, bytes): {largest}")
        raw = results["main"]["raw"][kind]
        print(
            f"  raw, same jobs: transcript JSON {raw.get('transcript JSON', 0):,.0f} B, "
            f"tool outputs {raw.get('tool outputs', 0):,.0f} B"
        )
    fleet = results["compact"]["fleet"]
    print("\nfleet keys, not per job (compact, bytes): " + ", ".join(f"{k} {v:,}" for k, v in sorted(fleet.items())))
    print(
        "\nper queued job (record, indexes, broker message; used_memory delta): "
        + ", ".join(f"{c} {v:,.0f} B" for c, v in queued.items())
    )
    for name, sizes in archived.items():
        print(
            f"\nin the archive ({name}, bytes per job over the mix): transcripts {sizes['transcripts']:,.0f}, "
            f"events and moved results {sizes['events']:,.0f}"
        )
    packing = results["compact"]["events_cpu"]
    print(
        "\nevents packed at a job's end (zlib -9, compact run; CPU per job): "
        + ", ".join(f"{kind} {ms:.2f} ms" for kind, ms in packing.items())
    )
    by_kind: dict[str, list[list[Any]]] = results["compact"]["batches"]
    every = [b for kind in KINDS for b in by_kind[kind]]
    print(f"\ncodecs over the compact run's {len(every)} appended batches (every job of the mix; CPU per job):")
    rows = codecs(every)
    jobs = args.each * 4 + 3
    for name, size, comp_ms, decomp_ms in rows:
        print(
            f"  {name:12} {size:>10,} B ({size / rows[0][1]:.3f}x)  compress {comp_ms / jobs:.2f} ms/job"
            f"  decompress {decomp_ms / jobs:.2f} ms/job"
        )
    for kind in ("tool-heavy", "one-line"):
        n = args.each
        print(f"  {kind} jobs alone ({len(by_kind[kind])} batches), CPU per job:")
        for name, size, comp_ms, decomp_ms in codecs(by_kind[kind]):
            if name in ("zstd -9", "zlib -6"):
                print(
                    f"    {name:10} {size / n:>10,.0f} B/job  compress {comp_ms / n:.2f} ms  "
                    f"decompress {decomp_ms / n:.2f} ms"
                )


if __name__ == "__main__":
    sys.exit(main())
