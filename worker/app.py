"""The Celery app (`celery -A claudeq.worker.app worker`, or `claudeq-worker`) and the task `claudeq.run(job_id)`.

Nothing is read at import: `create_app(settings)` builds the app (`claudeq-worker` passes its settings with the
command line's overrides); `app` and `settings` are created from the environment on first use, which is how
`celery -A claudeq.worker.app` finds the app.

The task hands the job to the process's engine and blocks its Celery thread until the engine is done with this
delivery (run finished, deferred, requeued or dropped). It never raises for job problems: a bad message is logged
and dropped, a bad record fails its job.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from celery import signals

from claudeq import connections
from claudeq.errors import ConfigError
from claudeq.keys import Keys
from claudeq.models import JobSpec

from ..config.celery import TASK_RUN, make_celery
from ..config.settings import Settings, load_settings
from .background.loops import Loops
from .delivery.engine import Engine, engine_executor_workers
from .delivery.ports import Ports
from .delivery.session_planner import SessionPlanner
from .store.job_store import make_worker_store

log = logging.getLogger("claudeq.worker")

#: Exit code when a repeated shutdown signal forces the process out.
EXIT_FORCED = 130
#: After a second shutdown signal, how long runs get to be requeued before the process exits anyway.
FORCE_EXIT_AFTER_S = 8.0

_settings: Settings | None = None
_app: Any = None
_app_lock = threading.Lock()


def create_app(cfg: Settings | None = None) -> Any:
    """Build this process's Celery app with `cfg` (default: settings from the environment) and register the task."""
    global _settings, _app
    with _app_lock:
        _settings = cfg if cfg is not None else load_settings()
        _app = make_celery(_settings, main="claudeq-worker")
        if _settings.sentinel_addresses:
            from .broker_transport import SENTINEL_TRANSPORT_PATH

            _app.conf.broker_transport = SENTINEL_TRANSPORT_PATH  # the same, through Sentinel
        elif _settings.redis_url.split("://", 1)[0] in ("redis", "rediss"):
            from .broker_transport import TRANSPORT_PATH

            _app.conf.broker_transport = TRANSPORT_PATH  # a queue entry that is not a message is dropped, logged
        _app.task(name=TASK_RUN, acks_late=True, ignore_result=True)(run)
        return _app


def get_app() -> Any:
    """This process's Celery app (created from the environment on first use)."""
    return _app if _app is not None else create_app()


def get_settings() -> Settings:
    """The settings this process's app was created with."""
    get_app()
    assert _settings is not None
    return _settings


def __getattr__(name: str) -> Any:
    # `claudeq.worker.app.app` / `.settings`: created on first use, so importing the module reads nothing.
    if name == "app":
        return get_app()
    if name == "settings":
        return get_settings()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_worker_id() -> str:
    """This process's worker id: CLAUDEQ_WORKER_ID, else host:pid."""
    return get_settings().worker_id or f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerRuntime:
    """Everything one worker process runs with."""

    settings: Settings
    engine: Engine
    loops: Loops
    metrics: Any
    pid: int
    passthrough: Any = None  # claudeq.worker.passthrough.server.PassThrough, when runs go through it
    warm: Any = None  # claudeq.worker.run.warm.WarmPool: the idle CLIs kept for later jobs


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()
_shutdown_signals = 0


def build_runtime(cfg: Settings, worker_id: str | None = None) -> WorkerRuntime:
    """Wire the engine of this process: store, accounts, runner, metrics, loops (not started)."""
    from .accounts.manager import AccountManager
    from .metrics.prometheus import WorkerMetrics
    from .passthrough.server import PassThrough
    from .run.fake_runner import BENCH_FAKE_RUNNER_ENV, FakeRunner, fake_run_seconds
    from .run.runner import Runner
    from .run.tools import wire_name

    timeout_s = cfg.worker_redis_timeout_s
    client = connections.sync_client(
        cfg,
        health_check_interval=30,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        # A connection for every call the engine's threads can make at once (redis-py's default pool of 100
        # refused the rest with MaxConnectionsError at a concurrency of a few dozen busy runs), and a few for the
        # pass-through and Celery's side.
        max_connections=engine_executor_workers(cfg.concurrency) + 16,
    )
    store = make_worker_store(cfg, client)
    # The engine loop's own client for a run's hot path (claim, heartbeat, fenced writes, events, spend, slot
    # release): no thread hop per call. A blocking pool: past its size a call waits for a connection, not fails.
    loop_client = connections.async_client(
        cfg,
        blocking=True,
        max_connections=engine_executor_workers(cfg.concurrency),
        timeout=timeout_s,
        health_check_interval=30,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    store.use_async(loop_client)
    runner = Runner(cfg)
    metrics = WorkerMetrics(mcp_tools=[wire_name(name) for name in runner.tools.names])

    async def send(job_id: str, spec: JobSpec | None) -> None:
        # The same message `send_task` would write, pushed directly (claudeq.broker): one round trip.
        await store.send_run(job_id, (spec.queue if spec else None) or cfg.queue, spec.priority if spec else 0)

    fake_s = fake_run_seconds()
    if fake_s is not None:
        log.warning("%s is set: FAKE runs of %.3f s, no CLI (for benchmarks only)", BENCH_FAKE_RUNNER_ENV, fake_s)
    accounts = AccountManager(cfg, client, Keys(cfg.key_prefix))
    accounts.use_async(loop_client)
    passthrough = (
        PassThrough(
            accounts.signals.record_response, refused=metrics.passthrough_refusal, prefixes=accounts.record_prefixes
        )
        if cfg.passthrough and fake_s is None
        else None
    )
    runner.passthrough = passthrough
    engine = Engine(
        cfg,
        store=store,
        ports=Ports(accounts, runner if fake_s is None else FakeRunner(fake_s), metrics),
        send=send,
        worker_id=worker_id or cfg.worker_id or f"{socket.gethostname()}:{os.getpid()}",
        sessions=SessionPlanner(cfg, store),
    )
    loops = Loops(engine)
    loops.install()
    return WorkerRuntime(cfg, engine, loops, metrics, os.getpid(), passthrough, runner.pool)


def get_runtime() -> WorkerRuntime:
    """This process's runtime, built and started on first use (per process: safe after fork)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            cfg = get_settings()
            _runtime = build_runtime(cfg, default_worker_id())
            if _runtime.passthrough is not None:
                _runtime.passthrough.start()
            _runtime.engine.start()
            log.info("engine started: worker %s, concurrency %d", _runtime.engine.worker_id, cfg.concurrency)
            from .run.sandbox import isolation

            words, problem = isolation(cfg.policy)  # which isolation runs with tools get here (a probe, once)
            if problem is None:
                log.info("isolation: %s", words)
            else:
                log.warning("isolation: %s: %s", words, problem)
        return _runtime


def run(job_id: Any = None, *_args: Any, **_kwargs: Any) -> str:
    """Run one delivery of a job (blocks this Celery thread until the engine is done with it)."""
    if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
        log.error("claudeq.run: malformed message (job id %r); dropped", str(job_id)[:80])
        return "dropped:malformed"
    try:
        return str(get_runtime().engine.deliver_blocking(job_id))
    except Exception:
        # Never crash the worker on one delivery; the reconciler recovers whatever state the job was left in.
        log.exception("job %s: delivery failed inside the worker", job_id)
        return "dropped:error"


# ---- Celery worker lifecycle ---------------------------------------------------------------------------------


_metrics_port: int | None = None


def start_metrics() -> int | None:
    """Serve this process's /metrics on CLAUDEQ_METRICS_PORT (once); ConfigError when the port is taken."""
    global _metrics_port
    port = get_settings().metrics_port
    if port > 0 and _metrics_port is None:
        _metrics_port = get_runtime().metrics.serve(port)
        log.info("metrics on :%d/metrics", _metrics_port)
    return _metrics_port


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _on_worker_init(**_: Any) -> None:
    get_runtime()
    # `claudeq-worker` already served the metrics (and exits on a taken port); under plain `celery worker`
    # Celery only logs what a signal handler raises, so say it loudly.
    try:
        start_metrics()
    except ConfigError as exc:
        log.error("metrics not served: %s", exc)


@signals.worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _on_shutting_down(**_: Any) -> None:
    """First signal: stop taking work and let runs finish within the grace period. Second: requeue them now."""
    global _shutdown_signals
    _shutdown_signals += 1
    runtime = _runtime
    if runtime is None:
        return
    if _shutdown_signals == 1:
        runtime.engine.begin_shutdown(runtime.settings.shutdown_grace_s)
        return
    log.warning("second shutdown signal: stopping every run now; exiting within %.0f s", FORCE_EXIT_AFTER_S)
    runtime.engine.hurry()
    timer = threading.Timer(FORCE_EXIT_AFTER_S, os._exit, args=(EXIT_FORCED,))
    timer.daemon = True
    timer.start()
    if _shutdown_signals >= 3:
        os._exit(EXIT_FORCED)


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _on_worker_shutdown(**_: Any) -> None:
    runtime = _runtime
    if runtime is None:
        return
    try:
        runtime.engine.begin_shutdown(0).result(timeout=FORCE_EXIT_AFTER_S)
    except Exception:
        log.exception("shutdown: runs did not stop in time")
    if runtime.warm is not None:
        try:
            runtime.engine.call(runtime.warm.close()).result(timeout=FORCE_EXIT_AFTER_S)
        except Exception:
            log.exception("shutdown: warm CLIs did not stop in time")
    try:
        runtime.loops.forget()
    except redis.RedisError:
        pass
    runtime.engine.stop()
    if runtime.passthrough is not None:
        runtime.passthrough.close()
    log.info("worker %s stopped", runtime.engine.worker_id)
