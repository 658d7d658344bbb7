"""A Redis script's arguments by name: one frozen dataclass per script (docs/architecture.md#script-arguments).

Each field is one of the script's KEYS (declared with `key()`) or ARGV (a plain field), in the order the script
binds them to named locals at the top of its `.lua` file (`local job = KEYS[1]` …); a field holding a list is a
variable-length part (a tail, or a list whose length another field gives) and is spread in place; a field holding
another script's `ScriptArgs` (a script that runs that one's with more: START holds ACQUIRE's and WRITE's) spreads
its KEYS among the KEYS and its ARGV among the ARGV, each named with the field's name as a prefix (`write_job_id`).
A builder fills the fields by name and gets the KEYS and ARGV lists from `keys()` and `argv()` (or the whole
`ScriptCall` from `call`), so no call site counts positions. `tests/unit/test_script_binders.py` checks that each
class, its script's header and its script's binder name the same arguments in the same order.
"""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from redis.commands.core import Script

from claudeq.script_calls import ScriptCall

T = TypeVar("T")

#: One value of KEYS or ARGV, as redis-py encodes it.
Arg = str | bytes | int | float

_KEY = "key"
_PART = "part"


def key() -> Any:
    """Declare a field of a `ScriptArgs` as one of the script's KEYS (a list field: several, spread in place)."""
    return dataclasses.field(metadata={_KEY: True})


def part(only: typing.Literal["keys", "argv"], prefix: str) -> dict[str, Any]:
    """The metadata (`field(metadata=part(...))`) of a field holding another script's `ScriptArgs` of which only its
    KEYS (`only="keys"`) or only its ARGV go here, named with `prefix` (FINISH's KEYS start with WRITE's, its ARGV end
    with them)."""
    return {_PART: (only, prefix)}


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
        return ScriptCall(script, self.keys(), self.argv(), parse, self)

    @classmethod
    def names(cls, keys: bool) -> list[str]:
        """The names of the KEYS (`keys` True) or ARGV fields, in order: what the script's binder and header say."""
        hints = typing.get_type_hints(cls)
        out: list[str] = []
        for f in dataclasses.fields(cls):
            inner = hints[f.name]
            if isinstance(inner, type) and issubclass(inner, ScriptArgs):
                only, prefix = f.metadata.get(_PART, (None, f.name))
                if only is None or (only == "keys") == keys:
                    out += [f"{prefix}_{name}" for name in inner.names(keys)]
            elif bool(f.metadata.get(_KEY)) == keys:
                out.append(f.name)
        return out

    def _spread(self, keys: bool) -> list[Any]:
        out: list[Any] = []
        for getter, nested in _plan(type(self), keys):
            if getter is not None:  # a run of plain fields on this side, read in one call
                out += getter(self)
                continue
            assert nested is not None
            name, is_key, only = nested
            value = getattr(self, name)
            if isinstance(value, ScriptArgs):
                if only is None or (only == "keys") == keys:
                    out.extend(value._spread(keys))
                continue
            if is_key != keys:
                continue
            if isinstance(value, list | tuple):
                out.extend(value)
            else:
                out.append(value)
        return out


#: Each class's fields as `_spread` walks them: (name, whether a KEY, which part of a nested `ScriptArgs` goes here,
#: whether the field is typed as one plain value: no list, no nested arguments to look for).
_Layout = tuple[tuple[str, bool, str | None, bool], ...]
_layouts: dict[type, _Layout] = {}
#: The types of a field that holds one value.
_SCALARS = (str, bytes, int, float, bool)


def _layout(cls: type) -> _Layout:
    """`cls`'s fields with what their metadata and types say, read once per class: the engine spreads ~15 argument
    objects per job (CLAIM, START with its nested ACQUIRE and WRITE, FINISH with WRITE and SETTLE), and looking each
    field's metadata up and its value's type over on every spread was a sizeable share of its calls per job
    (docs/scaling.md#the-engines-redis-client)."""
    layout = _layouts.get(cls)
    if layout is None:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # unresolvable annotations: every value's type is looked at, as it is given
            hints = {}
        layout = _layouts[cls] = tuple(
            (
                f.name,
                bool(f.metadata.get(_KEY)),
                f.metadata.get(_PART, (None, ""))[0],
                _scalar(hints.get(f.name)),
            )
            for f in dataclasses.fields(cls)
        )
    return layout


#: One step of `_spread` on one side: a getter of a run of plain fields of that side (a tuple of their values), or a
#: field that may hold a list or nested arguments, looked at as it is given (name, whether a KEY, which part).
_Step = tuple[Callable[[Any], tuple[Any, ...]] | None, tuple[str, bool, str | None] | None]
_plans: dict[tuple[type, bool], tuple[_Step, ...]] = {}


def _plan(cls: type, keys: bool) -> tuple[_Step, ...]:
    """`_layout(cls)` as `_spread` walks it for KEYS (`keys`) or ARGV, made once per class and side: each run of
    plain fields of that side is one `operator.attrgetter` call instead of a `getattr` per field (most classes are
    one run), the fields of the other side are left out (docs/scaling.md#the-engines-redis-client)."""
    plan = _plans.get((cls, keys))
    if plan is None:
        steps: list[_Step] = []
        run: list[str] = []
        for name, is_key, only, scalar in _layout(cls):
            if scalar:
                if is_key == keys:
                    run.append(name)
                continue
            if run:
                steps.append((_getter(run), None))
                run = []
            steps.append((None, (name, is_key, only)))
        if run:
            steps.append((_getter(run), None))
        plan = _plans[(cls, keys)] = tuple(steps)
    return plan


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of `names` of an object, as a tuple (attrgetter of one name gives the value alone)."""
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


def _scalar(hint: Any) -> bool:
    """Whether a field typed `hint` holds one plain value (`str`, `int`, … or a union of them, such as `Arg`)."""
    if hint in _SCALARS:
        return True
    members = typing.get_args(hint)
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and all(m in _SCALARS for m in members)
