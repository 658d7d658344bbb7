"""An OTLP/HTTP receiver on loopback that decodes what it is sent (opentelemetry-proto).

The tracing tests and the CLI probe point exporters at it (`OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint`); it
answers every export with an empty success and keeps the decoded spans, log records and metric names. Only
protobuf bodies (`http/protobuf`, optionally gzip-compressed) are understood: that is what claudeq's exporter and
the CLI send. docs/tracing.md describes what the spans look like.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def any_value(value: AnyValue) -> Any:
    """A protobuf AnyValue as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(items: Any) -> dict[str, Any]:
    """Repeated KeyValue as a dict."""
    result: dict[str, Any] = {}
    item: KeyValue
    for item in items:
        result[item.key] = any_value(item.value)
    return result


@dataclass(frozen=True)
class Span:
    """One received span, decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]
    scope: str


@dataclass
class Received:
    """Everything received so far."""

    spans: list[Span] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)
    metric_names: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


class OtlpReceiver:
    """`with OtlpReceiver() as receiver:` — an OTLP/HTTP endpoint at `receiver.endpoint` until the block ends."""

    def __init__(self) -> None:
        self.received = Received()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                reply = receiver.accept(self.path, body)
                self.send_response(200 if reply is not None else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                payload = reply or b""
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (the exporters append /v1/traces, /v1/logs, …)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def accept(self, path: str, body: bytes) -> bytes | None:
        """Decode one export; the serialized response, or None for an unknown path."""
        with self._lock:
            self.received.paths.append(path)
            if path.endswith("/v1/traces"):
                traces = ExportTraceServiceRequest.FromString(body)
                for rs in traces.resource_spans:
                    resource = attributes(rs.resource.attributes)
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            self.received.spans.append(
                                Span(
                                    name=s.name,
                                    trace_id=s.trace_id.hex(),
                                    span_id=s.span_id.hex(),
                                    parent_span_id=s.parent_span_id.hex(),
                                    kind=s.kind,
                                    start_ns=s.start_time_unix_nano,
                                    end_ns=s.end_time_unix_nano,
                                    attributes=attributes(s.attributes),
                                    events=[(e.name, attributes(e.attributes)) for e in s.events],
                                    status_code=s.status.code,
                                    resource=resource,
                                    scope=ss.scope.name,
                                )
                            )
                return ExportTraceServiceResponse().SerializeToString()
            if path.endswith("/v1/logs"):
                logs = ExportLogsServiceRequest.FromString(body)
                for rl in logs.resource_logs:
                    for sl in rl.scope_logs:
                        for record in sl.log_records:
                            entry = MessageToDict(record)
                            entry["attributes"] = attributes(record.attributes)
                            entry["body"] = any_value(record.body)
                            self.received.logs.append(entry)
                return ExportLogsServiceResponse().SerializeToString()
            if path.endswith("/v1/metrics"):
                metrics = ExportMetricsServiceRequest.FromString(body)
                for rm in metrics.resource_metrics:
                    for sm in rm.scope_metrics:
                        self.received.metric_names.extend(m.name for m in sm.metrics)
                return ExportMetricsServiceResponse().SerializeToString()
            return None

    def spans(self) -> list[Span]:
        """A copy of the spans received so far."""
        with self._lock:
            return list(self.received.spans)

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[Span]:
        """Wait until predicate(spans) is true; the spans then (or at the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if predicate(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def main() -> None:
    """`python -m tests.support.otlp_receiver`: a receiver in a process of its own (benchmarks). Prints
    `listening on <endpoint>`, then on SIGTERM one JSON line: the spans received, and how many were the CLI's."""
    import json
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with OtlpReceiver() as receiver:
        print(f"listening on {receiver.endpoint}", flush=True)
        stop.wait()
        spans = receiver.spans()
    cli = sum(1 for s in spans if s.name.startswith("claude_code."))
    print(json.dumps({"spans": len(spans), "cli_spans": cli}), flush=True)


if __name__ == "__main__":
    main()
