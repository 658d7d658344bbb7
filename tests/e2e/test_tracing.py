"""One trace per job (docs/tracing.md): a real worker, the real CLI and the simulator, exporting to an OTLP/HTTP
receiver on loopback that decodes the protocol (tests/support/otlp_receiver.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from claudeq import tracing
from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.otlp_receiver import OtlpReceiver, Span
from tests.support.run_dirs import group_workspace, open_base
from tests.support.worker_proc import SimAccount

pytestmark = pytest.mark.e2e

ATTEMPT = "invoke_agent claudeq"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as rx:
        yield rx


@pytest.fixture
def traced_producer(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Tracing on in this process, exporting to `receiver`; yields a tracer for the test's own "web request" span."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from claudeq import otel

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    tracing.enabled.cache_clear()
    otel.tracer.cache_clear()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the first traced test of this process sets the provider
        trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "test-app"})))
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test-app")
    exporter.shutdown()  # later exports of this processor go nowhere
    monkeypatch.undo()
    tracing.enabled.cache_clear()
    otel.tracer.cache_clear()


def ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    """The span ids above `span`, nearest first."""
    chain: list[str] = []
    parent = span.parent_span_id
    while parent and parent in by_id and parent not in chain:
        chain.append(parent)
        parent = by_id[parent].parent_span_id
    return chain


def every_value(span: Span) -> str:
    """Everything a span carries besides its name, as one text to search."""
    return json.dumps([span.attributes, span.events, span.resource], default=str)


def test_a_rate_limited_retried_job_with_a_tool_is_one_trace_with_the_cli_spans_under_its_second_attempt(
    client: Client,
    workers: WorkerFactory,
    receiver: OtlpReceiver,
    traced_producer: Any,
    settings: Settings,
    accounts: list[SimAccount],
) -> None:
    policy = settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})
    worker = workers(
        policy=policy,
        extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"},
    )
    nonce = uuid.uuid4().hex[:10]
    prompt = f'[[sim: error 429 times=1]] [[sim: tool mcp__claudeq__add {{"a": 2, "b": 3}}]] traced {nonce}'
    with traced_producer.start_as_current_span("GET /web-request") as web:
        job = client.submit(prompt=prompt, mcp_tools=["add"])
    record = client.wait(job.id, timeout=90, poll_s=0.1)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["rate_limited", "success"]
    assert record.trace_id == format(web.get_span_context().trace_id, "032x")
    assert client.get(job.id).public()["trace_id"] == record.trace_id

    def complete(spans: list[Span]) -> bool:
        names = [s.name for s in spans if s.trace_id == record.trace_id]
        return (
            names.count(ATTEMPT) == 2
            and "claudeq.terminal_write" in names
            and any(s.name == "claudeq.delivery" and s.attributes.get("claudeq.status") == "succeeded" for s in spans)
            and names.count("claude_code.interaction") >= 2
            and "claude_code.tool" in names
        )

    spans = [s for s in receiver.wait_for(complete, timeout=30) if s.trace_id == record.trace_id]
    names = sorted(s.name for s in spans)
    assert complete(spans), names
    by_id = {s.span_id: s for s in spans}
    assert len({s.trace_id for s in receiver.spans() if s.attributes.get("claudeq.job_id") == job.id}) == 1

    web_id = format(web.get_span_context().span_id, "016x")
    (submit,) = [s for s in spans if s.name == "claudeq.submit"]
    assert submit.parent_span_id == web_id and submit.attributes["claudeq.job_id"] == job.id
    assert submit.resource["service.name"] == "test-app"  # the application's provider, not one of claudeq's
    waits = [s for s in spans if s.name == "claudeq.queue_wait"]
    assert waits and all(w.parent_span_id == submit.span_id for w in waits)
    deliveries = [s for s in spans if s.name == "claudeq.delivery"]
    assert deliveries and all(d.parent_span_id == submit.span_id for d in deliveries)
    assert all(d.resource["service.name"] == "claudeq-worker" for d in deliveries)

    attempts = sorted((s for s in spans if s.name == ATTEMPT), key=lambda s: s.attributes["claudeq.attempt"])
    first, second = attempts
    assert [a.attributes["claudeq.outcome"] for a in attempts] == ["rate_limited", "success"]
    for attempt, stored in zip(attempts, record.attempts, strict=True):
        assert attempt.parent_span_id in {d.span_id for d in deliveries}
        assert attempt.attributes["claudeq.account"] == stored.account
        assert attempt.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attempt.attributes["gen_ai.agent.name"] == "claudeq"
        assert attempt.attributes["gen_ai.provider.name"] == "anthropic"
        kids = {s.name for s in spans if s.parent_span_id == attempt.span_id}
        assert {"claudeq.account_slot", "claudeq.run", "claude_code.interaction"} <= kids, kids
    assert second.attributes["gen_ai.conversation.id"] == record.session_id
    assert record.result is not None
    assert second.attributes["gen_ai.usage.output_tokens"] == record.attempts[1].usage.output_tokens  # type: ignore[union-attr]
    assert any(name in ("retry", "reroute") for name, _ in by_id[first.parent_span_id].events)

    # The CLI's own spans: its model requests and its tool call, under the attempt that made them.
    under_second = [s for s in spans if second.span_id in ancestors(s, by_id)]
    under_first = [s for s in spans if first.span_id in ancestors(s, by_id)]
    assert any(s.name == "claude_code.llm_request" for s in under_second)
    (tool,) = [s for s in under_second if s.name == "claude_code.tool"]
    assert tool.attributes["tool_name"] == "mcp__claudeq__add"
    assert tool.attributes["gen_ai.tool.name"] == "add"  # an MCP tool: its own name, its server apart
    assert all(s.resource["service.name"] == "claude-code" for s in under_second if s.name.startswith("claude_code"))
    refused = [s for s in under_first if s.name == "claude_code.llm_request"]
    assert refused and refused[0].attributes["status_code"] == 429
    (terminal,) = [s for s in spans if s.name == "claudeq.terminal_write"]
    assert terminal.attributes["claudeq.status"] == "succeeded"

    # The worker's log lines carry the ids of the span they were logged in (the job ends in its second attempt).
    line = f"job {job.id}: succeeded after 2 attempt(s) trace_id={record.trace_id} span_id={second.span_id}"
    assert line in worker.log()

    # No token and no prompt text in any attribute, event or resource, by default.
    secrets = [a.token_value for a in accounts]
    for span in receiver.spans():
        text = every_value(span)
        assert nonce not in text, f"prompt text in {span.name}"
        assert '"a": 2' not in text and "sum=5" not in text, f"tool input or output in {span.name}"
        for secret in secrets:
            assert secret not in text, f"a token in {span.name}"
        assert "sk-ant-" not in text, f"a token-shaped value in {span.name}"


def test_a_sandboxed_run_with_file_tools_and_a_cwd_exports_the_clis_spans(
    workers: WorkerFactory,
    receiver: OtlpReceiver,
    traced_producer: Any,
    settings: Settings,
    redis_client: redis.Redis,
) -> None:
    """A run with file tools and a cwd runs in a sandbox of its own, whose network reaches nothing but its
    pass-through and, for a traced job, the collector through the worker's relay: the CLI's spans arrive, under
    the attempt, tool call included (before the sandbox, a run under a uid of its own exported none)."""
    with open_base("cqt-tracing-") as base:
        workspace = group_workspace(base / "ws", 62506)
        note = workspace / "note.txt"
        note.write_text("a note\n")
        note.chmod(0o664)
        policy = settings.policy.model_copy(
            update={"allowed_tools": ["Read", "Glob", "Grep"], "workspace_roots": [workspace], "run_groups": [62506]}
        )
        boxed = settings.model_copy(update={"policy": policy, "run_root": base / "runs"})
        workers(
            policy=policy,
            run_root=base / "runs",
            extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"},
        )
        client = Client(boxed, redis_client=redis_client)
        directive = json.dumps({"file_path": str(note)})
        with traced_producer.start_as_current_span("GET /boxed"):
            job = client.submit(prompt=f"[[sim: tool Read {directive}]] read it", tools="read-only", cwd=str(workspace))
        record = client.wait(job.id, timeout=90, poll_s=0.1)
        assert record.status == "succeeded", record.error
        assert [e.data["is_error"] for e in client.events(job.id) if e.type == "tool_result"] == [False]

        def complete(spans: list[Span]) -> bool:
            names = [s.name for s in spans if s.trace_id == record.trace_id]
            return ATTEMPT in names and "claude_code.interaction" in names and "claude_code.tool" in names

        spans = [s for s in receiver.wait_for(complete, timeout=30) if s.trace_id == record.trace_id]
        assert complete(spans), sorted(s.name for s in spans)
        by_id = {s.span_id: s for s in spans}
        (attempt,) = [s for s in spans if s.name == ATTEMPT]
        (tool,) = [s for s in spans if s.name == "claude_code.tool"]
        assert attempt.span_id in ancestors(tool, by_id) and tool.attributes["tool_name"] == "Read"
