"""A Redis script's arguments by name: one frozen dataclass per script (docs/architecture.md#script-arguments).

Each field is one of the script's KEYS (declared with `key()`) or ARGV (a plain field), in the order the script
binds them to named locals at the top of its `.lua` file (`local job = KEYS[1]` …); a field holding a list is a
variable-length part (a tail, or a list whose length another field gives) and is spread in place. A builder fills
the fields by name and gets the KEYS and ARGV lists from `keys()` and `argv()` (or the whole `ScriptCall` from
`call`), so no call site counts positions. `tests/unit/test_script_binders.py` checks that each class, its script's
header and its script's binder name the same arguments in the same order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from redis.commands.core import Script

from claudeq.script_calls import ScriptCall

T = TypeVar("T")

#: One value of KEYS or ARGV, as redis-py encodes it.
Arg = str | bytes | int | float

_KEY = "key"


def key() -> Any:
    """Declare a field of a `ScriptArgs` as one of the script's KEYS (a list field: several, spread in place)."""
    return dataclasses.field(metadata={_KEY: True})


@dataclasses.dataclass(frozen=True)
class ScriptArgs:
    """The arguments of one script (`SCRIPT`, its path under `claudeq/lua/`), each field by the name its binder
    gives it."""

    SCRIPT: ClassVar[str]

    def keys(self) -> list[Any]:
        """The script's KEYS, in binder order."""
        return self._spread(True)

    def argv(self) -> list[Any]:
        """The script's ARGV, in binder order."""
        return self._spread(False)

    def call(self, script: Script, parse: Callable[[Any], T]) -> ScriptCall[T]:
        """A call of `script` (this class's script, registered) with these arguments."""
        return ScriptCall(script, self.keys(), self.argv(), parse)

    @classmethod
    def names(cls, keys: bool) -> list[str]:
        """The names of the KEYS (`keys` True) or ARGV fields, in order: what the script's binder and header say."""
        return [f.name for f in dataclasses.fields(cls) if bool(f.metadata.get(_KEY)) == keys]

    def _spread(self, keys: bool) -> list[Any]:
        out: list[Any] = []
        for f in dataclasses.fields(self):
            if bool(f.metadata.get(_KEY)) != keys:
                continue
            value = getattr(self, f.name)
            if isinstance(value, list | tuple):
                out.extend(value)
            else:
                out.append(value)
        return out
