"""Schema-driven values for the StructuredOutput tool: they must validate against the schema."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from claudeq.simulator.schema import SchemaError, generate


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Item(BaseModel):
    sku: str = Field(min_length=3, max_length=8)
    qty: int = Field(gt=0, le=10)
    price: float = Field(ge=0.5)


class Order(BaseModel):
    id: str
    items: list[Item] = Field(min_length=2)
    colour: Colour
    note: str | None = None
    tags: set[str] = Field(default_factory=set)
    parent: Order | None = None
    ratio: float = Field(gt=-5, lt=-1)
    even: int = Field(multiple_of=2, ge=3)


@pytest.mark.parametrize("model", [Item, Order])
def test_pydantic_schemas_yield_valid_instances(model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    value = generate(schema)
    jsonschema.validate(value, schema)
    model.model_validate(value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "email", "maxLength": 40},
        {"type": ["null", "integer"], "minimum": 7},
        {"const": {"k": 1}},
        {"enum": [3, "x"]},
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
            ]
        },
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2},
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 3, "uniqueItems": True},
        {"type": "object", "required": ["x"], "additionalProperties": {"type": "number", "maximum": -3}},
        {"type": "object", "minProperties": 2, "properties": {}},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5},
        {"type": "integer", "maximum": -10, "multipleOf": 4},
        {},
    ],
)
def test_hand_written_schemas_yield_valid_instances(schema: dict[str, Any]) -> None:
    jsonschema.validate(generate(schema), schema)


def test_generation_is_deterministic() -> None:
    schema = Order.model_json_schema()
    assert generate(schema) == generate(schema)


@pytest.mark.parametrize(
    "schema",
    [False, {"enum": []}, {"type": "integer", "minimum": 5, "maximum": 4}, {"$ref": "#/$defs/missing"}],
)
def test_impossible_schemas_raise(schema: Any) -> None:
    with pytest.raises(SchemaError):
        generate(schema)


def _bounded_numbers(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    bound = st.integers(-50, 50)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": kind}
        low, high = sorted([draw(bound), draw(bound)])
        if draw(st.booleans()):
            schema["minimum"] = low
        if draw(st.booleans()):
            schema["maximum"] = high + 30  # room for a multiple of the step
        if draw(st.booleans()):
            schema["multipleOf"] = draw(st.integers(1, 7))
        return schema

    return build()


leaf_schemas = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(
        lambda lo, extra: {"type": "string", "minLength": lo, "maxLength": lo + extra},
        st.integers(0, 30),
        st.integers(0, 10),
    ),
    st.sampled_from([{"type": "string", "format": f} for f in ("date", "uuid", "email", "uri")]),
    _bounded_numbers("integer"),
    _bounded_numbers("number"),
    st.lists(st.integers() | st.text(max_size=5), min_size=1, max_size=4).map(lambda v: {"enum": v}),
)


def _extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=6), inner, max_size=4).flatmap(
        lambda props: st.builds(
            lambda required, extra: {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": extra,
            },
            st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
            st.booleans(),
        )
    )
    arrays = st.builds(
        lambda items, low: {"type": "array", "items": items, "minItems": low},
        inner,
        st.integers(0, 3),
    )
    unions = st.lists(inner, min_size=1, max_size=3).map(lambda options: {"anyOf": [*options, {"type": "null"}]})
    return objects | arrays | unions


schemas = st.recursive(leaf_schemas, _extend, max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas)
def test_generated_value_validates_against_any_generated_schema(schema: dict[str, Any]) -> None:
    jsonschema.validate(generate(schema), schema)
