"""Whatever the request body, the simulator answers with a status and never crashes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claudeq.simulator.connection import Message
from claudeq.simulator.service import Simulator

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
blocks = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "tool_use", "tool_result", "image"]) | json_values,
        "text": st.text(max_size=20) | json_values,
        "content": json_values,
        "id": json_values,
        "name": json_values,
        "input": json_values,
        "tool_use_id": json_values,
    },
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "robot"]) | json_values,
        "content": st.text(max_size=20) | st.lists(blocks, max_size=3) | json_values,
    },
)
tools = st.fixed_dictionaries(
    {}, optional={"name": st.sampled_from(["StructuredOutput", "Bash"]) | json_values, "input_schema": json_values}
)
bodies = json_values | st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["claude-sonnet-5-5", "gpt-4", ""]) | json_values,
        "max_tokens": st.integers(-2, 10) | json_values,
        "messages": st.lists(messages, max_size=4) | json_values,
        "stream": st.booleans() | json_values,
        "tools": st.lists(tools, max_size=2) | json_values,
        "system": st.text(max_size=10) | st.lists(blocks, max_size=2) | json_values,
    },
)

# Mostly valid bodies, so the fuzzing also reaches the reply logic (tool calls, results, structured output).
prompt_texts = st.builds(
    lambda words, directive: f"{words} {directive}",
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "[[sim: tool t {}]]",
            '[[sim: text "a"]]',
            "[[sim: structured 5]]",
            "[[sim: tokens out=3 in=2]]",
            "[[sim: error 529 times=1]]",
            "[[sim: stall 0]]",
            "[[sim: drop]]",
            "[[sim: bogus]]",
        ]
    ),
)
plausible_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": prompt_texts}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use")}, optional={"id": json_values, "name": json_values, "input": json_values}
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result")}, optional={"tool_use_id": json_values, "content": json_values}
    ),
    st.fixed_dictionaries({"type": st.just("image")}, optional={"source": json_values}),
)
plausible_bodies = st.fixed_dictionaries(
    {
        "model": st.just("claude-sonnet-5-5"),
        "max_tokens": st.just(16),
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "assistant", "system"]),
                    "content": prompt_texts | st.lists(plausible_blocks, max_size=3),
                }
            ),
            min_size=1,
            max_size=4,
        ),
    },
    optional={"stream": st.booleans(), "tools": st.lists(tools, max_size=2), "system": json_values},
)


async def _status(sim: Simulator, body: bytes) -> int:
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": "POST", "headers": [(b"authorization", b"Bearer fuzz")]}
    await sim(scope, receive, send)
    return int(sent[0]["status"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_any_body_gets_an_answer_and_never_a_500(body: Any) -> None:
    sim = Simulator()
    status = asyncio.run(_status(sim, json.dumps(body).encode()))
    assert status in (200, 400, 404)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plausible_bodies)
def test_plausible_bodies_get_an_answer_and_never_a_500(body: Any) -> None:
    sim = Simulator()
    status = asyncio.run(_status(sim, json.dumps(body).encode()))
    assert status in (200, 400, 529)
