"""One Redis script call (`ScriptCall`: the script, its keys, its arguments and the parser of its answer), and the
mixin that sends a store's calls from the worker's event loop (`AsyncCalls`).

Workers drive many runs from one event loop: the calls each run makes (claim, heartbeat, fenced writes, spend,
slot release) are coroutines sent on the loop's async client (`use_async`), batched per turn of the loop; the
plain commands of the background loops' reads go as one pipeline per step (`_pipe`). Each such operation is one
coroutine method, never a sync method with a coroutine twin; without an async client (fakeredis in the unit tests,
the in-process testing kit) the same call goes on the store's sync client in a thread
(docs/scaling.md#the-engines-redis-client).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import hiredis
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import AbstractConnection, Connection, UnixDomainSocketConnection
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from claudeq.resp import PackedCall

T = TypeVar("T")
#: A call's answer: a call answering a `T` is also one answering any supertype of it (e.g. a list, an Iterable).
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class ScriptCall(Generic[T_co]):
    """One call of a registered script: its keys, its arguments, and what makes the reply into the answer (`named`:
    the `claudeq.script_args.ScriptArgs` the keys and arguments were spread from, for a script that runs this one's
    with more: START takes ACQUIRE's)."""

    script: Script
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T_co]
    named: object = None


#: Queues commands on a pipeline (`AsyncCalls._pipe`): the same redis-py command methods on either client's.
Queue = Callable[[Any], object]


@dataclass(frozen=True)
class PipeCall(Generic[T_co]):
    """Plain commands sent together: `queue` puts them on a pipeline of either client (one round trip; MULTI/EXEC
    with `transaction`), `parse` makes their replies (in order) into the answer. `client` is the store's sync client
    (`run_call`'s). `raise_on_error` False: a command's error is its reply, for `parse` to read. `blocking`: whether
    `parse` of these replies waits on something slow and sync (the transcript archive's database): the async sender
    parses them in a thread then."""

    client: Redis
    queue: Queue
    parse: Callable[[list[Any]], T_co]
    transaction: bool = False
    raise_on_error: bool = True
    blocking: Callable[[list[Any]], bool] | None = None


#: A store's operation as data: a script call or plain commands, sent by either client (`run_call`, `AsyncCalls.send`).
Call = ScriptCall[T] | PipeCall[T]


def run_call(call: Call[T] | PackedCall[T]) -> T:
    """Send `call` on the sync client (its script's, or its own; a `PackedCall`: the batch submit's, sync only)."""
    if isinstance(call, PackedCall):
        return call.send()
    if isinstance(call, PipeCall):
        return call.parse(_run_pipe(call.client, call.queue, call.transaction, call.raise_on_error))
    return call.parse(call.script(keys=call.keys, args=call.args))


def raw_reply(call: ScriptCall[Any], client: Any) -> Any:
    """Run `call`'s script on `client` and return its reply as Redis gave it; on a pipeline, queue it (the reply
    comes with the pipeline's): for a caller that sends the call with other commands (`call.parse` then reads the
    reply), or reads more of the reply than `parse` does."""
    return call.script(keys=call.keys, args=call.args, client=client)


def done(_: Any) -> None:
    """The answer of a call whose replies say nothing."""


class AsyncCalls:
    """Gives a store an optional async client (`use_async`) for its coroutine methods (`send`, `_pipe`). Without
    one, a call goes on the sync client (`redis`) in a thread."""

    redis: Redis
    _async: AsyncRedis | None = None

    def use_async(self, client: AsyncRedis | None) -> None:
        """Send the coroutine methods' calls on `client` (same server; used on one event loop only); None: in a
        thread each, on the sync client."""
        self._async = client

    async def send(self, call: Call[T]) -> T:
        """Send `call` from the event loop: on the async client (a script call batched with the loop turn's
        others), else on the sync client in a thread."""
        if self._async is None:
            return await asyncio.to_thread(run_call, call)
        if isinstance(call, PipeCall):
            replies = await self._pipe(call.queue, transaction=call.transaction, raise_on_error=call.raise_on_error)
            if call.blocking is not None and call.blocking(replies):
                return await asyncio.to_thread(call.parse, replies)
            return call.parse(replies)
        reply = await _batch_for(self._async).send(call.script, call.keys, call.args)
        return call.parse(reply)

    async def _pipe(self, queue: Queue, *, transaction: bool = False, raise_on_error: bool = True) -> list[Any]:
        """Send the commands `queue` puts on a pipeline (one round trip; MULTI/EXEC with `transaction`) from the
        event loop: on the async client, else on the sync client in a thread. -> their replies, in order (an error
        raised, or with `raise_on_error=False` returned as that command's reply)."""
        if self._async is None:
            return await asyncio.to_thread(_run_pipe, self.redis, queue, transaction, raise_on_error)
        pipe = self._async.pipeline(transaction=transaction)
        queue(pipe)
        return list(await pipe.execute(raise_on_error=raise_on_error))


def _run_pipe(client: Redis, queue: Queue, transaction: bool, raise_on_error: bool) -> list[Any]:
    pipe = client.pipeline(transaction=transaction)
    queue(pipe)
    return list(pipe.execute(raise_on_error=raise_on_error))


class _Batch:
    """The script calls made on one async client in one turn of its event loop go to Redis together: one pipeline
    (one connection taken from the pool, one write, the replies read in order) instead of one round trip each. A
    worker's runs make their calls in bursts (a claim, its slot, its write, ...), and redis-py's per-call cost (the
    pool, the timeout, the connection check) was half the engine loop's CPU. Each call gets its own reply or error;
    a connection error fails every call of the batch, as it would have failed each of them alone."""

    def __init__(self, client: AsyncRedis) -> None:
        self.client = client
        # What the client's encoder encodes text with (redis-py's ConnectionPool.get_encoder).
        kwargs = client.connection_pool.connection_kwargs
        self.encoding: str = kwargs.get("encoding", "utf-8")
        self.encoding_errors: str = kwargs.get("encoding_errors", "strict")
        self.encode = client.connection_pool.get_encoder().encode  # type: ignore[no-untyped-call]
        #: A plain client (its own connections, EVALSHA's reply as Redis gives it): a batch goes as one payload
        #: packed here (`_evalsha_packed`), not through redis-py's pipeline, which packs every argument in Python.
        self.packed = (
            issubclass(client.connection_pool.connection_class, (Connection, UnixDomainSocketConnection))
            and "EVALSHA" not in client.response_callbacks
        )
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
        if self.packed:
            return await self._evalsha_packed(batch)
        if len(batch) == 1:
            script, keys, args, _ = batch[0]
            try:
                return [await self.client.evalsha(script.sha, len(keys), *self._encoded(keys), *self._encoded(args))]
            except ResponseError as exc:
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for script, keys, args, _ in batch:
            pipe.evalsha(script.sha, len(keys), *self._encoded(keys), *self._encoded(args))
        return list(await pipe.execute(raise_on_error=False))

    async def _evalsha_packed(self, batch: list[tuple[Script, list[Any], list[Any], asyncio.Future[Any]]]) -> list[Any]:
        """The batch's EVALSHAs as one payload on one pooled connection, each reply (or error reply) in order: what
        the pipeline does (the same bytes on the wire, the same retries, the connection dropped when a read fails),
        with each command packed by hiredis in one call from arguments already bytes
        (docs/scaling.md#the-engines-redis-client)."""
        encoding, errors, encode = self.encoding, self.encoding_errors, self.encode
        commands = []
        for script, keys, args, _ in batch:
            command = [b"EVALSHA", script.sha.encode(), b"%d" % len(keys)]
            command += [
                value
                if type(value) is bytes
                else value.encode(encoding, errors)
                if type(value) is str
                else b"%d" % value  # as redis-py's encoder writes an int (its repr), without its type checks
                if type(value) is int
                else bytes(encode(value))  # what redis-py makes of the rest: a float as its repr, a bool refused
                for values in (keys, args)
                for value in values
            ]
            commands.append(hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]  # its stub: one item
        payload = b"".join(commands)
        pool = self.client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            replies: list[Any] = await conn.retry.call_with_retry(
                lambda: _exchange(conn, payload, len(batch)), lambda _: conn.disconnect()
            )
        finally:
            await pool.release(conn)
        return replies

    def _encoded(self, values: list[Any]) -> list[Any]:
        """`values` with each text already bytes, as the client's encoder would make it (the rest it encodes
        itself): redis-py's encoder asks every value's type four or five times, and a job's three scripts carry
        ~120 values, most of them text (docs/scaling.md#the-engines-redis-client)."""
        encoding, errors = self.encoding, self.encoding_errors
        return [value.encode(encoding, errors) if type(value) is str else value for value in values]


async def _exchange(conn: AbstractConnection, payload: bytes, count: int) -> list[Any]:
    """Send `payload` (`count` commands) and read their replies in order, an error reply in its place; a read that
    fails drops the connection (the rest of the replies are still on it), as redis-py's pipeline does.

    Each read may wait up to the connection's `socket_timeout` for its reply, as in redis-py's `read_response`, and
    ends as it does when none comes (the connection dropped, redis' TimeoutError); but the batch's reads share one
    loop timer, moved on only when it fires after a reply came, where `read_response` sets and cancels one per reply
    (docs/scaling.md#the-engines-redis-client)."""
    await conn.send_packed_command(payload)
    replies: list[Any] = []
    timeout = conn.socket_timeout
    deadline = _ReadDeadline(timeout) if timeout else None
    try:
        for _ in range(count):
            try:
                replies.append(await conn.read_response(timeout=math.inf))  # no timer of its own: `deadline`'s
            except ResponseError as exc:
                replies.append(exc)
            if deadline is not None:
                deadline.last = deadline.loop.time()
    except asyncio.CancelledError:
        await conn.disconnect(nowait=True)
        if deadline is not None and deadline.expired():
            raise RedisTimeoutError(f"Timeout reading from {conn._host_error()}") from None
        raise
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    finally:
        if deadline is not None:
            deadline.close()
    return replies


class _ReadDeadline:
    """The timeout of each read of an exchange (`timeout` from the last reply, or from the start), as one loop timer:
    set for the first read's deadline, it looks when it fires whether a reply came since it was set, and if so sets
    itself for the current read's deadline; else it cancels the task (`expired` then says the cancel was its own, as
    asyncio.timeout tells its own cancel from another's)."""

    __slots__ = ("armed", "cancelling", "fired", "handle", "last", "loop", "task", "timeout")

    def __init__(self, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.timeout = timeout
        self.last = self.armed = self.loop.time()  # when the current read began (the last reply came)
        self.cancelling = task.cancelling()
        self.fired = False
        self.handle: asyncio.TimerHandle | None = self.loop.call_at(self.armed + timeout, self._check)

    def _check(self) -> None:
        if self.last > self.armed:  # a reply came since: the current read's own deadline
            self.armed = self.last
            self.handle = self.loop.call_at(self.armed + self.timeout, self._check)
            return
        self.handle = None
        self.fired = True
        self.task.cancel()

    def expired(self) -> bool:
        """Whether the CancelledError being handled is this deadline's (and no one else's) cancel."""
        if not self.fired:
            return False
        self.fired = False
        return self.task.uncancel() <= self.cancelling

    def close(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.fired:  # fired as the last reply came: take its cancel back, as asyncio.timeout does
            self.fired = False
            self.task.uncancel()


_batches: weakref.WeakKeyDictionary[AsyncRedis, _Batch] = weakref.WeakKeyDictionary()


def _batch_for(client: AsyncRedis) -> _Batch:
    batch = _batches.get(client)
    if batch is None:
        batch = _batches[client] = _Batch(client)
    return batch
