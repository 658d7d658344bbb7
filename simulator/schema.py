"""Generate a deterministic JSON value that satisfies a JSON Schema (for the StructuredOutput tool).

Covers what pydantic and hand-written job schemas use: types (also as lists), const, enum, $ref to
`#/$defs` or `#/definitions`, allOf / anyOf / oneOf, properties / required / additionalProperties,
items / prefixItems / minItems / maxItems / uniqueItems, string lengths and common formats, numeric bounds
and multipleOf. `pattern` is not solved: a schema with one gets a best-effort string.
"""

from __future__ import annotations

import math
from typing import Any

_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "email": "sim@example.com",
    "uri": "https://example.com/sim",
    "url": "https://example.com/sim",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
    "duration": "P1D",
}

_MAX_DEPTH = 48
# Past this depth optional properties are left out and nullable unions take null, so recursive schemas end.
_SHALLOW = 8


class SchemaError(ValueError):
    """A schema this generator cannot satisfy."""


def generate(schema: Any, name: str = "value") -> Any:
    """A value valid against `schema`; `name` flavours generated strings (property names are used)."""
    root = schema if isinstance(schema, dict) else {}
    try:
        return _gen(schema, root, name, 0)
    except SchemaError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as e:
        # A malformed schema (a tool's input_schema is whatever the request says) must not crash the handler.
        raise SchemaError(f"malformed schema: {e!r}") from None


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    if not ref.startswith("#"):
        raise SchemaError(f"only local $ref is supported, got {ref!r}")
    node: Any = root
    for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"unresolvable $ref {ref!r}")
        node = node[part]
    return node


def _merge_all_of(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for sub in schema["allOf"]:
        if isinstance(sub, dict) and "$ref" in sub:
            sub = _resolve(sub["$ref"], root)
        if not isinstance(sub, dict):
            continue
        if "allOf" in sub:
            sub = _merge_all_of(sub, root)
        for key, value in sub.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = sorted({*merged.get("required", []), *value})
            else:
                merged.setdefault(key, value)
    return merged


def _gen(schema: Any, root: dict[str, Any], name: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise SchemaError("schema nests too deeply (recursive without a way out?)")
    if schema is True or schema is None or schema == {}:
        return name
    if schema is False:
        raise SchemaError("schema `false` accepts nothing")
    if not isinstance(schema, dict):
        raise SchemaError(f"not a schema: {schema!r}")
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        if rest and isinstance(target, dict):
            return _gen({"allOf": [target, rest]}, root, name, depth + 1)
        return _gen(target, root, name, depth + 1)
    if "allOf" in schema:
        return _gen(_merge_all_of(schema, root), root, name, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        if not schema["enum"]:
            raise SchemaError("empty enum")
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            # Prefer a branch that is not null (pydantic writes Optional[X] as anyOf [X, null]).
            nulls = [o for o in schema[key] if isinstance(o, dict) and o.get("type") == "null"]
            options = [o for o in schema[key] if o not in nulls]
            choice = nulls[0] if nulls and depth >= _SHALLOW else (options or schema[key])[0]
            base = {k: v for k, v in schema.items() if k != key}
            if base and isinstance(choice, dict):
                return _gen({"allOf": [base, choice]}, root, name, depth + 1)
            return _gen(choice, root, name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((t for t in kind if t != "null"), kind[0] if kind else None)
    if kind is None:
        kind = _guess_type(schema)
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, name, depth)
    if kind == "string":
        return _string(schema, name)
    if kind == "integer":
        return _number(schema, integer=True)
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    raise SchemaError(f"unknown type {kind!r}")


def _guess_type(schema: dict[str, Any]) -> str:
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems")):
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum")):
        return "number"
    return "string"


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    out = {key: _gen(sub, root, key, depth + 1) for key, sub in props.items() if depth < _SHALLOW or key in required}
    extra = schema.get("additionalProperties", True)
    for key in required:
        if key not in out:
            out[key] = _gen(extra if isinstance(extra, dict) else {}, root, key, depth + 1)
    i = 0
    while len(out) < schema.get("minProperties", 0):
        if extra is False:
            raise SchemaError("minProperties needs more properties than the schema allows")
        out[f"extra_{i}"] = _gen(extra if isinstance(extra, dict) else {}, root, f"extra_{i}", depth + 1)
        i += 1
    return out


def _array(schema: dict[str, Any], root: dict[str, Any], name: str, depth: int) -> list[Any]:
    prefix = schema.get("prefixItems", [])
    items = schema.get("items", {})
    low = schema.get("minItems", 0)
    high = schema.get("maxItems")
    count = max(low, len(prefix), 1)
    if high is not None:
        count = min(count, high)
    out: list[Any] = []
    for i in range(count):
        sub = prefix[i] if i < len(prefix) else items
        if sub is False:
            break
        value = _gen(sub, root, f"{name}_{i}", depth + 1)
        if schema.get("uniqueItems") and value in out:
            value = _unique_variant(sub, root, name, i, out, depth)
        out.append(value)
    if len(out) < low:
        raise SchemaError("cannot produce minItems distinct items")
    return out


def _unique_variant(sub: Any, root: dict[str, Any], name: str, i: int, taken: list[Any], depth: int) -> Any:
    # Different names give different strings; numbers get shifted by the bounds logic below.
    if isinstance(sub, dict) and sub.get("type") in ("integer", "number"):
        integer = sub["type"] == "integer"
        base = _number(sub, integer)
        for n in range(1, 1000):
            candidate = _number({**sub, "minimum": base + n * sub.get("multipleOf", 1)}, integer)
            if candidate not in taken:
                return candidate
    if isinstance(sub, dict) and "enum" in sub:
        for option in sub["enum"]:
            if option not in taken:
                return option
    for k in range(1, 1000):
        candidate = _gen(sub, root, f"{name}_{i}_{k}", depth + 1)
        if candidate not in taken:
            return candidate
    raise SchemaError("cannot produce distinct items")


def _string(schema: dict[str, Any], name: str) -> str:
    value = _FORMATS.get(schema.get("format", ""), f"sim {name}")
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    if len(value) < low:
        value = (value + " " + "x" * low)[:low] if low > len(value) + 1 else value + "x" * (low - len(value))
    if high is not None and len(value) > high:
        value = value[:high]
    return value


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    # Draft-4 style booleans make minimum / maximum exclusive.
    if isinstance(xlo, bool):
        xlo, lo = (lo, None) if xlo else (None, lo)
    if isinstance(xhi, bool):
        xhi, hi = (hi, None) if xhi else (None, hi)
    step = schema.get("multipleOf")

    def fits(v: float) -> bool:
        return (
            (lo is None or v >= lo)
            and (hi is None or v <= hi)
            and (xlo is None or v > xlo)
            and (xhi is None or v < xhi)
        )

    floor_ = max((b for b in (lo, xlo) if b is not None), default=None)
    ceil_ = min((b for b in (hi, xhi) if b is not None), default=None)
    # 0 is a multiple of everything and an integer: use it whenever the bounds allow.
    if fits(0):
        return 0 if integer else 0.0
    up = floor_ is not None and floor_ > 0
    edge = floor_ if up else ceil_
    assert edge is not None  # 0 only fails a bound that exists
    if integer or step:
        unit = step or 1
        k = math.ceil(edge / unit) if up else math.floor(edge / unit)
        for i in range(10_000):
            v = (k + i if up else k - i) * unit
            if integer and v != int(v):
                continue
            if fits(v):
                return int(v) if integer else float(v)
            if (up and ceil_ is not None and v > ceil_) or (not up and floor_ is not None and v < floor_):
                break
        raise SchemaError("numeric bounds and multipleOf cannot be satisfied")
    # Floats without multipleOf: the inclusive bound itself, else a step inside the open interval.
    gap = 1.0 if floor_ is None or ceil_ is None else min(1.0, (ceil_ - floor_) / 2)
    if up:
        v = lo if lo is not None and lo == floor_ else edge + gap
    else:
        v = hi if hi is not None and hi == ceil_ else edge - gap
    if not fits(v):
        raise SchemaError("numeric bounds cannot be satisfied")
    return float(v)
