"""Lookup by name in a configuration's list (the pool's accounts, the tenants file's tenants)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from pydantic import BaseModel


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def by_name(owner: BaseModel, items: list[N]) -> dict[str, N]:
    """`items` (a list field of `owner`) by name, built once per list: the engine looks accounts and tenants up by
    name several times per job. Kept in `owner.__dict__`, not as a field, so it is neither dumped nor compared; a copy
    of `owner` with another list gets its own."""
    index: tuple[list[N], dict[str, N]] | None = owner.__dict__.get("_by_name")
    if index is None or index[0] is not items:
        index = (items, {item.name: item for item in items})
        owner.__dict__["_by_name"] = index
    return index[1]
