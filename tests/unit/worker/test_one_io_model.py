"""One I/O model in the worker (docs/architecture.md#the-worker-by-concern): no class of the worker offers an
operation twice, as a plain method `x` and a coroutine `ax` — what a run calls on the engine loop is one coroutine.
Inherited methods count (a worker store that adds `aread` beside its base's `read` is a twin too), as long as both
come from claudeq's own classes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import claudeq.worker


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
