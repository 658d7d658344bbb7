"""LoopHost: the one asyncio loop of a worker process, on a long-lived thread, with its background coroutines.

The CLI processes are spawned from this thread, so their parent-death signal is tied to a thread that lives as long
as the worker (docs/cli-behaviour.md). Celery's task threads reach the loop through `call`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

#: Threads for the engine's few sync Redis calls left: an account's rate-limit and auth signals (sync: the
#: pass-through's threads make them too) and the scheduler's fired submits (the producer's submit). Every other call
#: goes on the loop's async client (claudeq.script_calls). Few on purpose: every extra runnable thread costs the loop
#: GIL hand-offs (the engine alone at 200 runs: ~1 ms of CPU per job more with 32 threads than with 8;
#: bench/bench_engine.py). A slow Redis makes these calls wait their turn, never a lease.
REDIS_THREADS = 8

_redis_executors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, concurrent.futures.Executor] = (
    weakref.WeakKeyDictionary()
)


async def in_redis_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread` for a sync Redis call: on the engine loop's Redis threads (the default executor on a
    loop that has none)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_redis_executors.get(loop), call)


#: A background loop: a coroutine function run on the loop while it lives.
Background = Callable[[], Coroutine[Any, Any, None]]


class LoopHost:
    """Starts, feeds and stops the engine's event loop thread."""

    def __init__(
        self,
        *,
        executor_workers: int,
        on_start: Callable[[], None] | None = None,
        on_stop: Background | None = None,
    ) -> None:
        self._executor_workers = executor_workers
        self._on_start = on_start
        self._on_stop = on_stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._background: list[Background] = []
        self._tasks: list[asyncio.Task[None]] = []

    def add_background(self, loop_fn: Background) -> None:
        """Run `loop_fn()` on the loop while it lives (call before start)."""
        self._background.append(loop_fn)

    @property
    def started(self) -> bool:
        """Whether the loop runs (or ran) on its thread."""
        return self._loop is not None

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="claudeq-engine", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        # The runs' blocking work (making run folders, reaping processes) goes through to_thread: room for every
        # run at once. Sync Redis calls have their own few threads (in_redis_thread).
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=self._executor_workers, thread_name_prefix="cq")
        )
        redis_executor = concurrent.futures.ThreadPoolExecutor(max_workers=REDIS_THREADS, thread_name_prefix="cq-redis")
        _redis_executors[loop] = redis_executor
        asyncio.set_event_loop(loop)
        self._loop = loop
        if self._on_start is not None:
            self._on_start()
        for loop_fn in self._background:
            self._tasks.append(loop.create_task(loop_fn()))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            for task in self._tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            if self._on_stop is not None:
                loop.run_until_complete(asyncio.gather(self._on_stop(), return_exceptions=True))
            loop.run_until_complete(loop.shutdown_default_executor())
            redis_executor.shutdown(wait=True)
            loop.close()

    def stop(self, timeout_s: float = 10) -> None:
        """Stop the loop and its thread."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._thread = None

    def call(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop from any thread (starting the loop if needed)."""
        self.start()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call_soon(self, fn: Callable[..., None], *args: object) -> None:
        """Run `fn(*args)` on the loop thread soon (thread-safe; nothing happens before the loop started)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn, *args)
