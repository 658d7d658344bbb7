"""Whether claudeq traces its jobs, and the no-op stand-ins used when it does not (docs/tracing.md).

Tracing is off unless the process is configured for it: `CLAUDEQ_OTEL_ENABLED=true`, or the standard OpenTelemetry
variables naming an OTLP destination (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
`OTEL_TRACES_EXPORTER=otlp`). `CLAUDEQ_OTEL_ENABLED=false` and `OTEL_SDK_DISABLED=true` turn it off whatever else is
set. When it is off nothing here imports opentelemetry: the producer's submit and the worker's run pay one cached
boolean test. When it is on, claudeq.otel (which needs the `otel` extra) does the work.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from claudeq.models import JobRecord

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for tracing (no import, no I/O)."""
    env = os.environ if environ is None else environ
    own = env.get("CLAUDEQ_OTEL_ENABLED", "").strip().lower()
    if own in _FALSE or env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    if own in _TRUE:
        return True
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "none" in exporters:
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "otlp" in exporters
    )


#: The distribution `claudeq[otel]` brings that claudeq.otel needs (looked up without importing anything).
EXPORTER_DIST = "opentelemetry-exporter-otlp-proto-http"


@cache
def enabled() -> bool:
    """Whether this process traces jobs; read once (call `enabled.cache_clear()` after changing the environment).
    Configured without the `otel` extra installed: off, with one warning saying what to install."""
    if not configured():
        return False
    import logging
    from importlib import metadata

    try:
        metadata.distribution(EXPORTER_DIST)
    except metadata.PackageNotFoundError:
        logging.getLogger("claudeq.tracing").warning(
            "tracing is configured (OTEL_*/CLAUDEQ_OTEL_ENABLED) but the 'otel' extra is not installed: tracing "
            "is off; pip install 'claudeq[otel]'"
        )
        return False
    return True


class SpanLike(Protocol):
    """What the worker does with a span: the real one (claudeq.otel) or NO_SPAN."""

    def set(self, **attributes: Any) -> None:
        """Set `claudeq.*` attributes (underscores stay: `retry_reason` -> `claudeq.retry_reason`)."""

    def set_raw(self, attributes: Mapping[str, Any]) -> None:
        """Set attributes under their own names (the GenAI conventions' `gen_ai.*`)."""

    def event(self, name: str, **attributes: Any) -> None:
        """Add an event."""

    def fail(self, message: str) -> None:
        """Mark the span as an error."""

    def end(self) -> None:
        """End the span (a second call does nothing)."""

    def traceparent(self) -> str | None:
        """This span's context as a traceparent, for a child elsewhere (None: not traced)."""

    def child(self, name: str, **attributes: Any) -> SpanLike:
        """Start a child span."""

    @contextmanager
    def current(self) -> Iterator[None]:
        """Make this span the active one in the block (log records then carry its ids)."""
        yield


class _NoSpan:
    """The span of an untraced job: every call does nothing."""

    def set(self, **attributes: Any) -> None:
        return None

    def set_raw(self, attributes: Mapping[str, Any]) -> None:
        return None

    def event(self, name: str, **attributes: Any) -> None:
        return None

    def fail(self, message: str) -> None:
        return None

    def end(self) -> None:
        return None

    def traceparent(self) -> str | None:
        return None

    def child(self, name: str, **attributes: Any) -> SpanLike:
        return self

    @contextmanager
    def current(self) -> Iterator[None]:
        yield


NO_SPAN: SpanLike = _NoSpan()


@contextmanager
def submit_span(record: JobRecord) -> Iterator[SpanLike]:
    """The producer's `submit` span around writing `record` (a child of the caller's current span, if any);
    NO_SPAN when tracing is off."""
    if not enabled():
        yield NO_SPAN
        return
    from claudeq import otel

    with otel.submit_span(record) as span:
        yield span


@contextmanager
def submit_spans(records: Sequence[JobRecord]) -> Iterator[list[SpanLike]]:
    """One `submit` span per record of a batch, siblings under the caller's current span (tracing on only)."""
    from claudeq import otel

    with otel.submit_spans(records) as spans:
        yield list[SpanLike](spans)


def delivery_span(record: JobRecord, first_claim: bool, worker_id: str) -> SpanLike:
    """The worker's span of one delivery of `record`, a child of its submit span; NO_SPAN when tracing is off or
    the job carries no trace context."""
    if not enabled() or not record.traceparent:
        return NO_SPAN
    from claudeq import otel

    return otel.delivery_span(record, first_claim, worker_id)


def cli_env(traceparent: str | None) -> dict[str, str]:
    """The variables that make a run's CLI export its own spans under `traceparent` (empty when not traced)."""
    if traceparent is None or not cli_traced():
        return {}
    from claudeq import otel

    return otel.cli_env(traceparent)


def cli_traced() -> bool:
    """Whether runs' CLIs export their own spans (CLAUDEQ_OTEL_CLI, on by default when tracing is on)."""
    return enabled() and os.environ.get("CLAUDEQ_OTEL_CLI", "true").strip().lower() not in _FALSE


def shutdown() -> None:
    """Flush and stop the exporter, if tracing started one."""
    if enabled():
        import sys

        module = sys.modules.get("claudeq.otel")
        if module is not None:
            module.shutdown()


__all__ = [
    "NO_SPAN",
    "SpanLike",
    "cli_env",
    "cli_traced",
    "configured",
    "delivery_span",
    "enabled",
    "shutdown",
    "submit_span",
    "submit_spans",
]
