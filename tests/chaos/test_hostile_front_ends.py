"""Hostile input through every front end (hypothesis): control characters, lone surrogates, huge and deeply nested
values, wrong types, unknown fields, markup, every path form, cron and interval extremes — handed to `Client.submit`,
`AsyncClient.submit`, `Client.add_schedule`, `claudeq submit --from-file` and `claudeq schedule add` (in process),
and the MCP server's `submit_job` and `add_schedule`. Each ends accepted or refused naming a field, never a traceback;
and afterwards the fleet's other jobs and schedules go on: a plain job is accepted and a steady schedule fires, with
every hostile schedule that was accepted stored beside it. Real Redis; the number of inputs is in README.md."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client as McpClient
from typer.testing import CliRunner

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobSpec, nesting_depth
from claudeq.producer import cli
from claudeq.producer.client import AsyncClient, Client
from claudeq.producer.mcp_server import build_server
from claudeq.schedules import ScheduleStore

#: Inputs each front end is handed (README.md states the sum).
EXAMPLES = {"client": 500, "async": 100, "schedule": 300, "cli_file": 60, "cli_schedule": 40, "mcp": 60}
HOSTILE = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)


def hostile(examples: int) -> settings:
    """The hostile tests' settings, with this many inputs."""
    return settings(HOSTILE, max_examples=examples)


def deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": [value]}
    return value


odd_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.characters(categories=["Cc", "Cs", "Zl", "Zp", "Cf"]), min_size=1, max_size=6),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "a\ud800b",
            "[/b]",
            "[red]x[/red]",
            "[[sim: text x]]",
            "../../etc/passwd",
            "/srv/work/../../etc",
            "//srv//work",
            "~/x",
            "./x",
            "C:\\x",
            "\\\\?\\C:\\x",
            "/srv/work/\x00x",
            "/srv/work/a\nb",
            "claudeq:tenant:alpha:conv-turns:x",
            "unacked",
            "_kombu.binding.celery",
            "gpt-4",
            "x" * 140_000,  # past one command-line argument (MAX_ARG_STRLEN)
        ]
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
values = st.one_of(
    st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3)),
    st.sampled_from([deep(60), deep(600), [[[[[]]]]], {"type": "object", "properties": deep(40)}]),
)
FIELDS = [*JobSpec.model_fields, "max_turn", "cwdd", "Prompt", "", "\x00", "a\ud800"]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=6))
    spec = {name: draw(values) for name in names}
    if draw(st.booleans()):
        spec["prompt"] = draw(odd_text | st.just("a plain prompt"))
    return spec


crons = st.one_of(
    odd_text,
    st.sampled_from(
        [
            "0 0 30 2 *",
            "61 2 * * *",
            "* * * * *",
            "0 0 1 1 * 0 2020",
            "* * * * * 0 2099",
            "*/0 * * * *",
            "0 0 * * 8",
            "@yearly",
            "0 0 29 2 1",
            "* * * * * * *",
        ]
    ),
)
intervals = st.one_of(st.none(), st.integers(-5, 10**13), st.sampled_from([0, 1, 10**12, 2**63]), values)
names = st.one_of(st.sampled_from(["nightly", "a", "x" * 100, "x" * 101]), odd_text)


def refused_with_fields(exc: JobSpecError) -> None:
    assert exc.errors, "a refusal names no field"
    for field, reason in exc.errors:
        assert isinstance(field, str) and field and isinstance(reason, str) and reason, exc.errors


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Client]:
    client = Client(settings.model_copy(update={"policy": settings.policy.model_copy(update={"workspace_roots": []})}))
    yield client
    client.close()


def the_fleet_goes_on(client: Client) -> None:
    """A plain job is accepted, and a steady schedule fires beside whatever hostile schedules were stored."""
    assert client.submit(prompt="a plain job after the hostile ones").id
    store = ScheduleStore(client.store.redis, client.store.keys)
    # Another tenant's: the hostile schedules count against their own tenant's limits, not this one's.
    client.add_schedule("canary", prompt="canary", every_s=60, tenant="canary", replace=True)
    store.redis.zadd(client.store.keys.schedules_due, {"canary/canary": time.time() - 0.1})
    fired: list[JobSpec] = []

    def submit(spec: JobSpec) -> str:
        fired.append(spec)
        return client.submit(spec).id

    store.fire_due(submit, limit=10_000)
    assert any(spec.metadata.get("schedule") == "canary" for spec in fired)
    listing = client.schedules()  # every stored schedule lists
    assert any(info.schedule.name == "canary" for info in listing)
    assert fleet_ok(client)


def fleet_ok(client: Client) -> bool:
    """No stored schedule is left due that the scheduler cannot handle (each was fired or paused)."""
    now = time.time()
    due = client.store.redis.zrangebyscore(client.store.keys.schedules_due, "-inf", now - 5)
    return not due


@hostile(EXAMPLES["client"])
@given(spec=specs())
def test_client_submit_accepts_or_refuses_with_a_field(spec: dict[str, Any], fleet: Client) -> None:
    try:
        fleet.submit(spec)
    except JobSpecError as exc:
        refused_with_fields(exc)


@hostile(EXAMPLES["async"])
@given(spec=specs())
def test_async_client_submit_accepts_or_refuses_with_a_field(spec: dict[str, Any], fleet: Client) -> None:
    async def submit() -> None:
        await AsyncClient(client=fleet).submit(spec)

    try:
        asyncio.run(submit())
    except JobSpecError as exc:
        refused_with_fields(exc)


@hostile(EXAMPLES["schedule"])
@given(name=names, spec=specs(), cron=st.one_of(st.none(), crons), every_s=intervals, tz=odd_text | st.just("UTC"))
def test_add_schedule_accepts_or_refuses_with_a_field(
    name: Any, spec: dict[str, Any], cron: Any, every_s: Any, tz: Any, fleet: Client
) -> None:
    try:
        fleet.add_schedule(name, spec, cron=cron, every_s=every_s, tz=tz, replace=True)
    except JobSpecError as exc:
        refused_with_fields(exc)


def test_after_hostile_schedules_the_others_still_fire(fleet: Client) -> None:
    @hostile(EXAMPLES["schedule"] // 2)
    @given(name=names, cron=st.one_of(st.none(), crons), every_s=intervals)
    def add(name: Any, cron: Any, every_s: Any) -> None:
        try:
            fleet.add_schedule(name, {"prompt": "p"}, cron=cron, every_s=every_s, replace=True)
        except JobSpecError as exc:
            refused_with_fields(exc)

    add()
    the_fleet_goes_on(fleet)


def cli_env(settings: Settings) -> dict[str, str]:
    return {
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
    }


@hostile(EXAMPLES["cli_file"])
@given(lines=st.lists(specs() | values, min_size=1, max_size=3))
def test_submit_from_file_exits_0_or_2_without_a_traceback(
    lines: list[Any], settings: Settings, tmp_path: Path, fleet: Client
) -> None:
    path = tmp_path / "jobs.jsonl"
    try:
        text = "\n".join(json.dumps(line) for line in lines)
    except (ValueError, RecursionError):
        text = "{not json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    done = CliRunner().invoke(cli.app, ["submit", "--from-file", str(path)], env=cli_env(settings))
    assert done.exit_code in (0, 2), (done.exit_code, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)


@hostile(EXAMPLES["cli_schedule"])
@given(
    name=names, prompt=odd_text, cron=st.one_of(st.none(), crons), every=st.one_of(st.none(), st.integers(-5, 10**13))
)
def test_schedule_add_exits_0_or_2_without_a_traceback(
    name: str, prompt: str, cron: str | None, every: int | None, settings: Settings, fleet: Client
) -> None:
    args = ["schedule", "add", "--", name or "x", prompt or "p"]
    if cron is not None:
        args[2:2] = ["--cron", cron]
    if every is not None:
        args[2:2] = ["--every", str(every)]
    args.insert(2, "--replace")
    done = CliRunner().invoke(cli.app, args, env=cli_env(settings))
    assert done.exit_code in (0, 2), (args, done.exit_code, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)


def sendable(value: Any) -> bool:
    """Whether an MCP client can send `value` at all (UTF-8 JSON, within its serializer's depth): what it cannot
    send never reaches the server."""
    if nesting_depth(value) > 200:
        return False
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, UnicodeEncodeError, RecursionError):
        return False
    return True


@hostile(EXAMPLES["mcp"])
@given(
    spec=specs(),
    rule=st.fixed_dictionaries({}, optional={"cron": crons, "every_s": intervals, "name": names}),
)
def test_mcp_tools_answer_or_refuse_naming_a_field(spec: dict[str, Any], rule: dict[str, Any], fleet: Client) -> None:
    assume(sendable(spec) and sendable(rule))

    async def call() -> None:
        async with McpClient(build_server(fleet)) as mcp:
            for tool, args in (("submit_job", spec), ("add_schedule", {**rule, "prompt": "p", "spec": spec})):
                answer = await mcp.call_tool(tool, args)
                if answer.is_error:
                    text = " ".join(getattr(block, "text", "") for block in answer.content)
                    # A crash is "Error executing tool X" and nothing more: a refusal says what and why.
                    assert text.strip() != f"Error executing tool {tool}", (tool, args)
                    assert ":" in text, text

    asyncio.run(call())
