"""One I/O model in the worker (docs/architecture.md#the-worker-by-concern): no class of the worker offers an
operation twice, as a plain method `x` and a coroutine `ax` — what a run calls on the engine loop is one coroutine.
Inherited methods count (a worker store that adds `aread` beside its base's `read` is a twin too), as long as both
come from claudeq's own classes. And the engine makes its Redis calls on the loop's async client, not in threads,
but for the few that have no async form (docs/scaling.md#the-engines-redis-client). On the producer's side,
`AsyncClient` restates none of `Client`'s operations: each is `Client`'s own, run in a thread or on the loop."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import claudeq.worker
from claudeq.accounts import AccountStore
from claudeq.conversations import ConversationStore
from claudeq.jobs import JobStore
from claudeq.producer.client import AsyncClient, Client
from claudeq.script_calls import ScriptCall, run_call
from claudeq.tenants import TenantStore
from claudeq.worker.store.job_store import WorkerJobStore


def worker_classes() -> Iterator[type]:
    """Every class defined in a module of claudeq.worker."""
    for info in pkgutil.walk_packages(claudeq.worker.__path__, "claudeq.worker."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def twins(cls: type) -> list[str]:
    """`x`/`ax` pairs of methods `cls` has from claudeq's own classes (its bases' included)."""
    own: dict[str, object] = {}
    for base in reversed(cls.__mro__):
        if base.__module__.split(".")[0] != "claudeq":
            continue
        own.update(
            {name: value for name, value in vars(base).items() if callable(value) or isinstance(value, property)}
        )
    return sorted(f"{name[1:]}/{name}" for name in own if name.startswith("a") and name[1:] in own)


def test_no_worker_class_has_a_method_and_its_coroutine_twin() -> None:
    classes = list(worker_classes())
    assert len(classes) > 50  # the walk found the worker's classes
    found = {f"{cls.__module__}.{cls.__qualname__}": pairs for cls in classes if (pairs := twins(cls))}
    assert found == {}


#: The stores: each operation is one call builder (claudeq/script_calls.py), sent with `run_call` (sync) or
#: `AsyncCalls.send` (the worker's event loop); none has a second method doing the same (docs/architecture.md).
STORES = (JobStore, WorkerJobStore, AccountStore, TenantStore, ConversationStore)
#: The forms a second way to make the same operation takes beside `x`: its builder, its commands, its parsing.
TWIN_FORMS = ("{}_call", "queue_{}", "{}_of")


def store_twins(classes: Sequence[type] = STORES) -> list[str]:
    """The operations of `classes` offered twice: `x` beside `x_call`, `queue_x` or `x_of` (a leading `_` aside),
    and a method that only sends another one's call (`run_call(self.y_call(...))`, `await self.send(...)`),
    whatever its name. Each pair is named once, by the class that defines one of its two methods."""
    found: list[str] = []
    for cls in classes:
        methods = {
            name: value
            for base in reversed(cls.__mro__)
            if base.__module__.startswith("claudeq")
            for name, value in vars(base).items()
            if inspect.isfunction(value) or isinstance(value, staticmethod)
        }
        bare = {name.lstrip("_"): name for name in methods}
        pairs = {(bare[op], bare[form.format(op)]) for op in bare for form in TWIN_FORMS if form.format(op) in bare}
        pairs |= {(name, sent) for name, value in methods.items() if (sent := _sends_only(value)) in methods}
        found += [f"{cls.__name__}.{a}/{b}" for a, b in sorted(pairs) if a in vars(cls) or b in vars(cls)]
    return found


def _sends_only(function: object) -> str | None:
    """The method whose call `function` only sends (None: it does something else too)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None
    function_def = tree.body[0]
    if not isinstance(function_def, ast.FunctionDef | ast.AsyncFunctionDef):  # made by a decorator or a dataclass
        return None
    body = [s for s in function_def.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr) or body[0].value is None:
        return None
    sent = body[0].value.value if isinstance(body[0].value, ast.Await) else body[0].value
    if not (isinstance(sent, ast.Call) and ast.unparse(sent.func) in ("run_call", "self.send") and sent.args):
        return None
    call = sent.args[0]
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "self":
        return call.func.attr
    return None


#: The twins still to go; empty once every store offers each operation one way.
TWINS_LEFT: list[str] = []


def test_each_store_operation_exists_once() -> None:
    assert store_twins() == TWINS_LEFT


def test_a_store_twin_is_caught_by_its_name_or_by_what_it_does() -> None:
    class Store:
        __module__ = "claudeq.example"

        def read(self) -> None: ...

        def queue_read(self) -> None: ...

        def take(self) -> int:
            """Sends take_call."""
            return run_call(self.take_call())

        def take_call(self) -> ScriptCall[int]: ...

        def done_call(self) -> ScriptCall[int]: ...

    class WorkerStore(Store):
        __module__ = "claudeq.worker.example"

        def _write_call(self) -> ScriptCall[int]: ...

        async def put(self) -> int:
            return await self.send(self._write_call())  # type: ignore[attr-defined,no-any-return]

        async def send_more(self) -> int:
            return 1 + await self.send(self._write_call())  # type: ignore[attr-defined,no-any-return]

    assert store_twins([Store]) == ["Store.read/queue_read", "Store.take/take_call"]
    assert store_twins([WorkerStore]) == ["WorkerStore.put/_write_call"]


def test_a_twin_is_caught_and_an_inherited_one_too() -> None:
    class Store:
        __module__ = "claudeq.example"

        def read(self) -> None: ...

    class WorkerStore(Store):
        __module__ = "claudeq.worker.example"

        async def aread(self) -> None: ...

        def close(self) -> None: ...

    assert twins(WorkerStore) == ["read/aread"]
    assert twins(Store) == []


#: What AsyncClient may define beside Client's method of the same name: its handle is its own type (no I/O).
ASYNC_OWN = {"handle"}


def restated(sync_cls: type, async_cls: type) -> list[str]:
    """The operations `async_cls` defines again beside `sync_cls`'s of the same name: a method of its own body, not
    one built from `sync_cls`'s (whose `__wrapped__` leads back to it)."""
    return sorted(
        name
        for name, value in vars(async_cls).items()
        if callable(value)
        and not name.startswith("__")
        and callable(getattr(sync_cls, name, None))
        and inspect.unwrap(value).__qualname__.startswith(f"{async_cls.__qualname__}.")
    )


def test_the_async_client_restates_no_operation_of_the_client() -> None:
    shared = [name for name in vars(AsyncClient) if not name.startswith("__") and hasattr(Client, name)]
    assert {"submit", "get", "list", "cancel", "wait", "events"} <= set(shared)  # the walk sees the operations
    assert restated(Client, AsyncClient) == sorted(ASYNC_OWN)


def test_a_restated_operation_is_caught_and_a_built_one_is_not() -> None:
    class Sync:
        def get(self, job_id: str) -> str:
            return job_id

        def cancel(self, job_id: str) -> str:
            return job_id

    class Async:
        async def get(self, job_id: str) -> str:  # restated
            return job_id

        cancel = functools.wraps(Sync.cancel)(lambda self, job_id: job_id)

    assert restated(Sync, Async) == ["get"]


#: The only sync calls the worker's engine makes in a thread (`in_redis_thread`, `asyncio.to_thread`) outside
#: `worker/run/` (a run's processes and folders): what has no async client, by module. Everything else goes on the
#: loop's async client as a call (claudeq/script_calls.py; docs/scaling.md#the-engines-redis-client).
THREAD_CALLS_ALLOWED = {
    "worker/accounts/manager.py": {"prefix_key"},  # reads the job's CLAUDE.md files for its prefix key, no Redis
    "worker/delivery/handler.py": {"fn"},  # _quiet: an account's rate-limit and auth signals (the pass-through's too)
    "worker/background/loops.py": {
        "self._schedules.fire_due",  # a fired tick goes through the producer's own submit
        "self.store.archive_job",  # the archive's database client is sync
        "archive.purge",
    },
    "worker/delivery/workspaces.py": {"prepare", "collect", "remove"},  # git and folders, no Redis
}


def thread_calls(path: Path) -> set[str]:
    """What `path` calls in a thread: the first argument of each `in_redis_thread(...)` / `asyncio.to_thread(...)`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = ast.unparse(node.func)
        if name in ("in_redis_thread", "asyncio.to_thread", "loop.run_in_executor"):
            found.add(ast.unparse(node.args[0]))
    return found


def test_the_engine_makes_no_redis_call_in_a_thread_but_the_few_it_must() -> None:
    root = Path(claudeq.worker.__path__[0]).resolve()
    seen: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = f"worker/{path.relative_to(root).as_posix()}"
        if rel.startswith("worker/run/") or rel == "worker/loop_host.py":
            continue
        if calls := thread_calls(path):
            seen[rel] = calls
    assert seen == THREAD_CALLS_ALLOWED


def test_a_thread_hop_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "async def f(store):\n    await in_redis_thread(store.get, 'j')\n    await store.reads.get('j')\n"
    )
    assert thread_calls(module) == {"store.get"}
