"""claudeq's spans, with the OpenTelemetry SDK (the `otel` extra); imported only when tracing is on (claudeq.tracing).

One trace per job (docs/tracing.md): the producer's `claudeq.submit` span, whose context the job's record keeps
(`traceparent`), and under it each delivery's spans on the workers: `claudeq.queue_wait`, `claudeq.delivery`, and in
that the attempts (`invoke_agent claudeq`, GenAI conventions) with their `claudeq.account_slot` wait, `claudeq.run`
and the CLI's own spans, and the `claudeq.terminal_write`. Attributes carry ids, names, counts and outcomes, never a
prompt, an output or a credential.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from claudeq.models import JobRecord

_PROPAGATOR = TraceContextTextMapPropagator()
#: `service.name` of this process's spans unless OTEL_SERVICE_NAME says otherwise (the worker sets its own).
SERVICE = {"name": "claudeq"}
#: The CLI's variables that would put prompt, output or tool text in its telemetry; blank unless opted in.
_CLI_CONTENT_VARS = (
    "OTEL_LOG_USER_PROMPTS",
    "OTEL_LOG_TOOL_DETAILS",
    "OTEL_LOG_TOOL_CONTENT",
    "OTEL_LOG_ASSISTANT_RESPONSES",
    "OTEL_LOG_RAW_API_BODIES",
)


@cache
def tracer() -> trace.Tracer:
    """claudeq's tracer: from the process's tracer provider when the application set one, else from a provider
    exporting over OTLP/HTTP as the OTEL_* variables say."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # nobody set one: ours
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: SERVICE["name"]}
        sdk_provider = TracerProvider(resource=Resource.create(attributes))
        sdk_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(sdk_provider)
        provider = trace.get_tracer_provider()
    return provider.get_tracer("claudeq")


def shutdown() -> None:
    """Flush the spans not exported yet (the provider's own at-exit hook does it too)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is not None:
        flush()


def _own(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {f"claudeq.{k}": v for k, v in attributes.items() if v is not None}


def _ns(value: datetime) -> int:
    return int(value.timestamp() * 1e9)


class JobSpan:
    """One span of a job's trace (SpanLike)."""

    __slots__ = ("_ended", "_span")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._ended = False

    def set(self, **attributes: Any) -> None:
        self._span.set_attributes(_own(attributes))

    def set_raw(self, attributes: Mapping[str, Any]) -> None:
        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def event(self, name: str, **attributes: Any) -> None:
        self._span.add_event(name, _own(attributes))

    def fail(self, message: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, message))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()

    def traceparent(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier.get("traceparent")

    def child(self, name: str, **attributes: Any) -> JobSpan:
        context = trace.set_span_in_context(self._span)
        return JobSpan(tracer().start_span(name, context=context, attributes=_own(attributes)))

    @contextmanager
    def current(self) -> Iterator[None]:
        with trace.use_span(self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield


def _job_attributes(record: JobRecord) -> dict[str, Any]:
    return {"job_id": record.id, "tenant": record.spec.tenant, "queue": record.spec.queue}


@contextmanager
def submit_span(record: JobRecord) -> Iterator[JobSpan]:
    """`claudeq.submit`, current while the block writes the job (a child of the caller's current span)."""
    with tracer().start_as_current_span(
        "claudeq.submit", kind=SpanKind.PRODUCER, attributes=_own(_job_attributes(record)), record_exception=True
    ) as span:
        yield JobSpan(span)


@contextmanager
def submit_spans(records: Sequence[JobRecord]) -> Iterator[list[JobSpan]]:
    """`claudeq.submit` per record, siblings (none current), ended when the block ends."""
    spans = [
        tracer().start_span("claudeq.submit", kind=SpanKind.PRODUCER, attributes=_own(_job_attributes(r)))
        for r in records
    ]
    try:
        yield [JobSpan(span) for span in spans]
    except BaseException as exc:
        for span in spans:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        for span in spans:
            span.end()


def _parent(traceparent: str) -> Context:
    return _PROPAGATOR.extract({"traceparent": traceparent})


def delivery_span(record: JobRecord, first_claim: bool, worker_id: str) -> JobSpan:
    """`claudeq.delivery` for one claim of the job, after a `claudeq.queue_wait` span for the time it waited:
    since its submit (first claim), or since it was deferred or requeued (the record's `ready_at`, else the end of
    its last attempt)."""
    assert record.traceparent is not None
    parent = _parent(record.traceparent)
    waited_from: datetime | None = record.created_at if first_claim else record.ready_at
    if waited_from is None and record.attempts:
        waited_from = record.attempts[-1].finished_at
    attributes = _own({**_job_attributes(record), "worker": worker_id, "attempts_before": len(record.attempts)})
    if waited_from is not None:
        wait = tracer().start_span(
            "claudeq.queue_wait", context=parent, start_time=_ns(waited_from), attributes=_own({"job_id": record.id})
        )
        wait.end()
    return JobSpan(
        tracer().start_span("claudeq.delivery", context=parent, kind=SpanKind.CONSUMER, attributes=attributes)
    )


def cli_env(traceparent: str) -> dict[str, str]:
    """The CLI's telemetry switches (docs/cli-behaviour.md#telemetry): traces only, under `traceparent`, to the
    worker's collector (the OTEL_EXPORTER_OTLP_* variables it inherits), without prompt or tool text unless
    CLAUDEQ_OTEL_LOG_CONTENT=true."""
    env = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",  # 2.1.332 exports no span without it
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_SERVICE_NAME": "claude-code",
        "TRACEPARENT": traceparent,
        "TRACESTATE": "",
    }
    if not (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")):
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"  # what the worker's own exporter speaks
    content = os.environ.get("CLAUDEQ_OTEL_LOG_CONTENT", "").strip().lower() in {"1", "true", "yes", "on"}
    for name in _CLI_CONTENT_VARS:
        env[name] = "1" if content and name in ("OTEL_LOG_USER_PROMPTS", "OTEL_LOG_TOOL_DETAILS") else ""
    return env


class _LogIds(logging.Filter):
    """Puts the current span's ids on every log record (`%(otel_trace_id)s`, `%(otel_span_id)s`; "-" outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.otel_trace_id = format(context.trace_id, "032x")
            record.otel_span_id = format(context.span_id, "016x")
        else:
            record.otel_trace_id = record.otel_span_id = "-"
        return True


LOG_FORMAT_SUFFIX = " trace_id=%(otel_trace_id)s span_id=%(otel_span_id)s"


def install_log_ids(handlers: list[logging.Handler]) -> None:
    """Give `handlers` the ids of the span current when a record is logged, and say so in their format."""
    for handler in handlers:
        handler.addFilter(_LogIds())
        formatter = handler.formatter
        fmt = formatter._fmt if formatter is not None else None
        if fmt and LOG_FORMAT_SUFFIX not in fmt:
            handler.setFormatter(logging.Formatter(fmt + LOG_FORMAT_SUFFIX, formatter.datefmt if formatter else None))
