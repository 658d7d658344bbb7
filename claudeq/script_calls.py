"""One Redis script call (`ScriptCall`: the script, its keys, its arguments and the parser of its answer), and the
mixin that sends a store's calls from the worker's event loop (`AsyncCalls`).

Workers drive many runs from one event loop: the calls each run makes (claim, heartbeat, fenced writes, spend,
slot release) are coroutines sent on the loop's async client (`use_async`), batched per turn of the loop. Each such
operation is one coroutine method, never a sync method with a coroutine twin; without an async client (fakeredis
in the unit tests, the in-process testing kit) the same call goes on the store's sync client in a thread
(docs/scaling.md#the-engines-redis-client).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio
from redis.commands.core import Script
from redis.exceptions import NoScriptError

T = TypeVar("T")


@dataclass(frozen=True)
class ScriptCall(Generic[T]):
    """One call of a registered script: its keys, its arguments, and what makes the reply into the answer."""

    script: Script
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T]


def run_call(call: ScriptCall[T]) -> T:
    """Send `call` on the sync client its script was registered on."""
    return call.parse(call.script(keys=call.keys, args=call.args))


class AsyncCalls:
    """Gives a store an optional async client (`use_async`) for its coroutine methods (`_send`). Without one, a
    call goes on the sync client in a thread."""

    _async: redis.asyncio.Redis | None = None

    def use_async(self, client: redis.asyncio.Redis | None) -> None:
        """Send the coroutine methods' calls on `client` (same server; used on one event loop only); None: in a
        thread each, on the sync client."""
        self._async = client

    async def _send(self, call: ScriptCall[T]) -> T:
        """Send `call` from the event loop: batched on the async client, else on the sync client in a thread."""
        if self._async is None:
            return await asyncio.to_thread(run_call, call)
        reply = await _batch_for(self._async).send(call.script, call.keys, call.args)
        return call.parse(reply)


class _Batch:
    """The script calls made on one async client in one turn of its event loop go to Redis together: one pipeline
    (one connection taken from the pool, one write, the replies read in order) instead of one round trip each. A
    worker's runs make their calls in bursts (a claim, its slot, its write, ...), and redis-py's per-call cost (the
    pool, the timeout, the connection check) was half the engine loop's CPU. Each call gets its own reply or error;
    a connection error fails every call of the batch, as it would have failed each of them alone."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self.pending: list[tuple[Script, list[Any], list[Any], asyncio.Future[Any]]] = []
        self.sending: set[asyncio.Task[None]] = set()  # batches in flight (a task nobody holds may vanish)

    def send(self, script: Script, keys: list[Any], args: list[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((script, keys, args, future))
        return future

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        task = asyncio.ensure_future(self._execute(batch))
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)

    async def _execute(self, batch: list[tuple[Script, list[Any], list[Any], asyncio.Future[Any]]]) -> None:
        try:
            replies = await self._evalsha(batch)
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:  # a Redis that restarted or was flushed: load the scripts, send those calls again
                for script in {batch[i][0].sha: batch[i][0] for i in missing}.values():
                    await self.client.script_load(script.script)
                again = await self._evalsha([batch[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except BaseException as exc:
            for *_, future in batch:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()  # the loop is going away: so are its callers
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _evalsha(self, batch: list[tuple[Script, list[Any], list[Any], asyncio.Future[Any]]]) -> list[Any]:
        if len(batch) == 1:
            script, keys, args, _ = batch[0]
            try:
                return [await self.client.evalsha(script.sha, len(keys), *keys, *args)]
            except redis.ResponseError as exc:
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for script, keys, args, _ in batch:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


_batches: weakref.WeakKeyDictionary[redis.asyncio.Redis, _Batch] = weakref.WeakKeyDictionary()


def _batch_for(client: redis.asyncio.Redis) -> _Batch:
    batch = _batches.get(client)
    if batch is None:
        batch = _batches[client] = _Batch(client)
    return batch
