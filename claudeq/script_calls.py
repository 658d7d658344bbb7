"""One Redis script call, sendable on the sync client or on an async one (`ScriptCall`), and the mixin that gives a
store both (`AsyncCalls`).

Workers drive many runs from one event loop: the calls each run makes (claim, heartbeat, fenced writes, spend,
slot release) go on an async client from the loop, while the same stores serve sync callers (producers, the CLI,
the background loops) unchanged. Each method builds its call once and sends it either way, so the two paths cannot
drift apart (docs/scaling.md#the-engines-redis-client).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis.asyncio
from redis.commands.core import AsyncScript, Script

T = TypeVar("T")


@dataclass(frozen=True)
class ScriptCall(Generic[T]):
    """One call of a registered script: its keys, its arguments, and what makes the reply into the answer."""

    script: Script
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T]


class AsyncCalls:
    """Gives a store an optional async client (`use_async`) for the coroutine twins of its hot methods. Without
    one, a twin runs its sync method in a thread (the unit tests' fakeredis)."""

    _async: redis.asyncio.Redis | None = None
    _async_scripts: dict[str, AsyncScript] | None = None

    def use_async(self, client: redis.asyncio.Redis | None) -> None:
        """Send the coroutine twins' calls on `client` (same server; used on one event loop only); None: in a
        thread each, on the sync client."""
        self._async = client
        self._async_scripts = {}

    def _run(self, call: ScriptCall[T]) -> T:
        return call.parse(call.script(keys=call.keys, args=call.args))

    async def _arun(self, client: redis.asyncio.Redis, call: ScriptCall[T]) -> T:
        if self._async_scripts is None:
            self._async_scripts = {}
        script = self._async_scripts.get(call.script.sha)
        if script is None:
            script = self._async_scripts[call.script.sha] = client.register_script(call.script.script)
        return call.parse(await script(keys=call.keys, args=call.args))
