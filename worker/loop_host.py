"""LoopHost: the one asyncio loop of a worker process, on a long-lived thread, with its background coroutines.

The CLI processes are spawned from this thread, so their parent-death signal is tied to a thread that lives as long
as the worker (docs/cli-behaviour.md). Celery's task threads reach the loop through `call`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: A background loop: a coroutine function run on the loop while it lives.
Background = Callable[[], Coroutine[Any, Any, None]]


class LoopHost:
    """Starts, feeds and stops the engine's event loop thread."""

    def __init__(self, *, executor_workers: int, on_start: Callable[[], None] | None = None) -> None:
        self._executor_workers = executor_workers
        self._on_start = on_start
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
        # Redis calls go through to_thread: size the pool for every run's heartbeat, events and writes at once.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=self._executor_workers, thread_name_prefix="cq")
        )
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
            loop.run_until_complete(loop.shutdown_default_executor())
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
