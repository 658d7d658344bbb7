"""Directive parsing: `[[sim: …]]` in prompt text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from claudeq.simulator.directives import DirectiveError, Gate, parse_directives, strip_directives


def test_plain_text_has_no_directives() -> None:
    steering = parse_directives("just a prompt with [[brackets]] and [sim: not one]")
    assert steering.raw == []
    assert steering.tools == [] and steering.error is None


def test_tool_directive_with_json_input() -> None:
    steering = parse_directives('add [[sim: tool mcp__calc__add {"a": 2, "b": [[3]]}]] please')
    assert [(t.name, t.input) for t in steering.tools] == [("mcp__calc__add", {"a": 2, "b": [[3]]})]
    assert steering.raw == ['tool mcp__calc__add {"a": 2, "b": [[3]]}']


def test_tool_directives_keep_their_order() -> None:
    steering = parse_directives("[[sim: tool first]] then [[sim: tool second {}]]")
    assert [(t.name, t.input) for t in steering.tools] == [("first", {}), ("second", {})]


def test_error_with_times_and_after() -> None:
    steering = parse_directives("[[sim: error 500 after=1 times=2]]")
    assert steering.error == (500, Gate(after=1, times=2))


@pytest.mark.parametrize(
    ("after", "times", "active"),
    [(0, None, [True] * 5), (0, 2, [True, True, False, False, False]), (1, 1, [False, True, False, False, False])],
)
def test_gate_acts_on_the_right_requests(after: int, times: int | None, active: list[bool]) -> None:
    assert [Gate(after, times).active(seen) for seen in range(5)] == active


def test_stall_delay_drop_tokens_text() -> None:
    steering = parse_directives(
        "[[sim: stall 2.5 times=1]] [[sim: delay 1]] [[sim: drop]] "
        '[[sim: tokens out=500 in=7]] [[sim: text "hi ]] there"]]'
    )
    assert steering.stall == (2.5, Gate(0, 1))
    assert steering.delay == (1.0, Gate())
    assert steering.drop == Gate()
    assert (steering.tokens_out, steering.tokens_in) == (500, 7)
    assert steering.text == "hi ]] there"


def test_text_directive_accepts_bare_words() -> None:
    assert parse_directives("[[sim: text hello world]]").text == "hello world"


def test_structured_directive() -> None:
    steering = parse_directives('[[sim: structured {"title": "x", "n": 1}]]')
    assert steering.has_structured and steering.structured == {"title": "x", "n": 1}


def test_structured_nested_builds_an_output_deeper_than_a_directive_may_carry() -> None:
    steering = parse_directives("[[sim: structured nested=255]]")
    depth, value = 0, steering.structured
    while isinstance(value, dict):
        depth, value = depth + 1, value["a"]
    assert steering.has_structured and depth == 255 and value == 0
    for bad in ("[[sim: structured nested=0]]", "[[sim: structured nested=501]]", "[[sim: structured nested=x]]"):
        with pytest.raises(DirectiveError, match="nested="):
            parse_directives(bad)
    with pytest.raises(DirectiveError, match="unexpected argument"):
        parse_directives('[[sim: structured {"a": 1} nested=3]]')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[sim: explode]]", "unknown directive 'explode'"),
        ("[[sim: error]]", "expected an HTTP status"),
        ("[[sim: error 200]]", "4xx or 5xx"),
        ("[[sim: error abc]]", "expected a number"),
        ("[[sim: error 500 times=x]]", "times="),
        ("[[sim: error 500 color=red]]", "unknown option color="),
        ("[[sim: stall -1]]", "must not be negative"),
        ("[[sim: tool]]", "expected a tool name"),
        ("[[sim: tool t [1, 2]]]", "JSON object"),
        ("[[sim: tool t {bad json}]]", "bad JSON"),
        ("[[sim: tokens]]", "out=N"),
        ("[[sim: error 500", "unterminated"),
        ("[[sim: ]]", "needs a verb"),
    ],
)
def test_malformed_directive_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(DirectiveError, match=message.replace("[", r"\[")):
        parse_directives(text)


def test_strip_directives_leaves_the_prose() -> None:
    assert strip_directives('a [[sim: tool x {"k": "]]"}]] b [[sim: error 529]]c') == "a  b c"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
def test_any_json_object_round_trips_as_tool_input(tool_input: dict[str, Any]) -> None:
    steering = parse_directives(f"prefix [[sim: tool mcp__x__y {json.dumps(tool_input)}]] suffix")
    assert steering.tools[0].input == tool_input


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
@example("_=")  # a quoted string shaped like key=value once became an option and left no text
@example("times=2")
def test_text_round_trips_through_a_json_string(text: str) -> None:
    assert parse_directives(f"[[sim: text {json.dumps(text)}]]").text == text
