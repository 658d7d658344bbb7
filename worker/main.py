"""`claudeq-worker`: start a Celery worker (thread pool, one engine loop) or check this host's worker health."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time

import redis

from claudeq import connections, tracing
from claudeq.errors import ConfigError

from ..config.settings import Settings, load_settings

#: Exit codes (named: compose healthchecks and scripts branch on them).
EXIT_OK = 0
EXIT_UNHEALTHY = 1
EXIT_CONFIG = 2

log = logging.getLogger("claudeq.worker")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="claudeq-worker", description="Run a claudeq worker (Celery, threads).")
    parser.add_argument("--concurrency", type=int, help="runs in flight (default CLAUDEQ_CONCURRENCY)")
    parser.add_argument("--queues", help="comma-separated queues to consume (default CLAUDEQ_QUEUES)")
    parser.add_argument("--metrics-port", type=int, help="serve /metrics on this port (0 = off)")
    parser.add_argument("--loglevel", default=os.environ.get("CLAUDEQ_LOG_LEVEL", "INFO"))
    parser.add_argument("--check", action="store_true", help="exit 0 if this host's worker heartbeat is fresh")
    parser.add_argument(
        "--bench-fake-runner",
        type=float,
        metavar="SECONDS",
        help="FOR BENCHMARKS ONLY: no CLI, every run sleeps SECONDS and succeeds (CLAUDEQ_BENCH_FAKE_RUNNER)",
    )
    return parser.parse_args(argv)


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """The settings the command line sets (they win over the environment)."""
    out: dict[str, object] = {}
    if args.concurrency is not None:
        out["concurrency"] = args.concurrency
    if args.queues:
        out["queues"] = [q.strip() for q in args.queues.split(",") if q.strip()]
    if args.metrics_port is not None:
        out["metrics_port"] = args.metrics_port
    return out


def check_health(settings: Settings) -> int:
    """EXIT_OK when the heartbeat of CLAUDEQ_WORKER_ID (or of a worker on this host) is fresh, else EXIT_UNHEALTHY."""
    from claudeq.keys import Keys

    from .background.loops import worker_ttl_s

    keys = Keys(settings.key_prefix)
    max_age = worker_ttl_s(settings.heartbeat_s)
    try:
        client = connections.sync_client(settings, socket_timeout=3, socket_connect_timeout=3)
        now = time.time()
        if settings.worker_id:
            score = client.zscore(keys.workers, settings.worker_id)
            return EXIT_OK if score is not None and now - float(score) <= max_age else EXIT_UNHEALTHY
        host = socket.gethostname()
        for raw_id in client.zrangebyscore(keys.workers, now - max_age, "+inf"):
            worker_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            if client.hget(keys.worker(worker_id), "host") == host.encode():
                return EXIT_OK
    except redis.RedisError as exc:
        print(f"claudeq-worker --check: redis unreachable ({type(exc).__name__})", file=sys.stderr)
    return EXIT_UNHEALTHY


def preflight(settings: Settings) -> None:
    """Fail fast on what would make every run fail: no accounts, no CLI."""
    from claudeq.archive import open_archive

    from .run.launcher import locate_cli, wrapper_path
    from .run.tools import ToolRegistry

    if not settings.accounts.accounts:
        raise ConfigError(
            "CLAUDEQ_ACCOUNTS_FILE",
            "no accounts configured; point CLAUDEQ_ACCOUNTS_FILE at a TOML file with [[accounts]] tables, "
            "or export CLAUDE_CODE_OAUTH_TOKEN / ANTHROPIC_API_KEY",
        )
    locate_cli(settings)
    wrapper_path()
    ToolRegistry.from_settings(settings)  # a bad tools module fails here, not on the first job
    open_archive(settings.archive_url)  # and a bad or unreachable transcript archive


def main(argv: list[str] | None = None) -> int:
    """Entry point of `claudeq-worker`."""
    args = parse_args(argv)
    if args.bench_fake_runner is not None:
        # Not a setting: claudeq.worker.run.fake_runner reads it from the environment when the runtime is built.
        os.environ["CLAUDEQ_BENCH_FAKE_RUNNER"] = str(args.bench_fake_runner)
    try:
        settings = load_settings(**overrides(args))
        if args.check:
            return check_health(settings)
        preflight(settings)
    except ConfigError as exc:
        print(f"claudeq-worker: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=args.loglevel.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
        stream=sys.stderr,
    )
    if tracing.enabled():  # docs/tracing.md: the worker's spans, and its log lines carry their ids
        from claudeq import otel

        otel.SERVICE["name"] = "claudeq-worker"
        otel.install_log_ids(logging.getLogger().handlers)
    from .app import create_app, start_metrics

    app = create_app(settings)

    try:
        start_metrics()  # before Celery starts: a taken port stops the worker with a clear message
    except ConfigError as exc:
        print(f"claudeq-worker: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    node = f"claudeq.{os.getpid()}@{socket.gethostname()}"
    app.worker_main(
        [
            "worker",
            "--pool=threads",
            f"--concurrency={settings.concurrency}",
            f"--queues={','.join(settings.queues)}",
            f"--hostname={node}",
            f"--loglevel={args.loglevel.upper()}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
    tracing.shutdown()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
