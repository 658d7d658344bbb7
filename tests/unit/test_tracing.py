"""Tracing (docs/tracing.md): when it is on, the switch, the trace context in the record, and the spans of a
delivery with the engine's fakes; when it is off, no opentelemetry module is ever imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fakeredis
import pytest

from claudeq import tracing
from claudeq.models import JobRecord, JobSpec, trace_id_of, utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

#: A submit through the producer client and a run through the engine (its fakes), both on fakeredis; prints the
#: opentelemetry modules loaded and the spans exported (when a test provider is set up: tracing on).
SCRIPT = """
import importlib.abc, json, sys, traceback
importers = set()

class Watch(importlib.abc.MetaPathFinder):
    # Records the file that imports each opentelemetry module (the import itself goes ahead).
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            files = [f.filename for f in traceback.extract_stack()[:-1] if not f.filename.startswith("<")]
            importers.add(next((f for f in reversed(files) if "importlib" not in f), "<script>"))
        return None

sys.meta_path.insert(0, Watch())
import fakeredis
if sys.argv[1] == "on":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
from datetime import timedelta
from claudeq.models import utcnow
from claudeq.producer.client import Client
from claudeq.script_calls import run_call
from claudeq.worker.store.job_store import make_worker_store
from tests.conftest import make_settings
from tests.support.engine_fakes import FakeAccounts, FakeRunner, rate_limited, success
from tests.unit.worker.test_engine import A, Harness

settings = make_settings("redis://127.0.0.1:1/0", "trace:", heartbeat_s=0.05, lease_ttl_s=1, retry_base_s=0.01,
                         retry_max_s=0.02, max_attempts=3)
server = fakeredis.FakeServer()
client = Client(settings, redis_client=fakeredis.FakeRedis(server=server))
job = client.submit(prompt="hello").id
store = make_worker_store(settings, fakeredis.FakeRedis(server=server))
h = Harness(settings, store, FakeRunner(rate_limited(utcnow() + timedelta(hours=1)), success()), FakeAccounts(A))
first = h.deliver(job)
h.accounts.cooled.clear()  # the deferral's reset came: delivered again
store.redis.hset(store.keys.job(job), "status", "queued")
second = h.deliver(job)
h.engine.stop()
out = {"statuses": [first, second], "trace_id": run_call(store.get_call(job)).trace_id,
       "modules": sorted(m for m in sys.modules if m.startswith("opentelemetry")), "importers": sorted(importers),
       "claudeq": sorted(m for m in sys.modules if m.startswith("claudeq"))}
if sys.argv[1] == "on":
    out["spans"] = [{"name": s.name, "trace": format(s.context.trace_id, "032x"),
                     "id": format(s.context.span_id, "016x"),
                     "parent": format(s.parent.span_id, "016x") if s.parent else None,
                     "attributes": dict(s.attributes or {})} for s in exporter.get_finished_spans()]
print(json.dumps(out))
"""


def run_script(mode: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CLAUDEQ_"))}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"CLAUDEQ_OTEL_ENABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"CLAUDEQ_OTEL_ENABLED": "true"}, True),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, False),  # metrics or logs alone are not tracing
    ],
)
def test_tracing_is_on_only_when_configured(env: dict[str, str], on: bool) -> None:
    assert tracing.configured(env) is on


def test_the_trace_id_is_read_from_a_valid_traceparent_only() -> None:
    assert trace_id_of(TRACEPARENT) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of("00-xyz-b7ad6b7169203331-01") is None
    assert trace_id_of(None) is None and trace_id_of("") is None


def test_the_record_keeps_the_trace_context_and_shows_the_trace_id() -> None:
    client = Client(make_settings("redis://127.0.0.1:1/0", "tp:"), redis_client=fakeredis.FakeRedis())
    record = JobRecord(id="j1", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow(), traceparent=TRACEPARENT)
    run_call(client.store.create_call(record))
    stored = client.get("j1")
    assert stored.traceparent == TRACEPARENT and stored.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert stored.public()["trace_id"] == stored.trace_id
    untraced = JobRecord(id="j2", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow())
    run_call(client.store.create_call(untraced))
    assert "traceparent" not in client.store.redis.hgetall(client.store.keys.job("j2"))  # no field, no memory
    assert client.get("j2").public()["trace_id"] is None


def test_with_tracing_off_a_submit_and_a_run_import_no_opentelemetry() -> None:
    result = run_script("off")
    assert result["statuses"] == ["deferred", "succeeded"]
    assert result["trace_id"] is None
    # Nothing of claudeq's imports opentelemetry. redis-py (8.x) itself tries `opentelemetry.sdk.metrics` when it is
    # installed (redis/observability, for its own optional metrics): that import is not ours to avoid.
    importers = result["importers"]
    assert isinstance(importers, list)
    ours = [f for f in importers if not f.startswith(sys.prefix) or "/claudeq/" in f]
    assert ours == [], ours
    modules = result["modules"]
    assert isinstance(modules, list)
    print("opentelemetry modules third parties imported:", len(modules), "importers:", importers)
    assert "claudeq.otel" not in result["claudeq"]  # type: ignore[operator]
    assert not [m for m in modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter"))], modules


def test_with_tracing_on_a_deferred_job_continues_the_trace_of_its_submit() -> None:
    result = run_script("on", CLAUDEQ_OTEL_ENABLED="true")
    assert result["statuses"] == ["deferred", "succeeded"]
    spans = result["spans"]
    assert isinstance(spans, list)
    (submit,) = [s for s in spans if s["name"] == "claudeq.submit"]
    assert {s["trace"] for s in spans} == {result["trace_id"]} == {submit["trace"]}
    deliveries = [s for s in spans if s["name"] == "claudeq.delivery"]
    waits = [s for s in spans if s["name"] == "claudeq.queue_wait"]
    assert len(deliveries) == 2 and len(waits) == 2
    assert all(s["parent"] == submit["id"] for s in deliveries + waits)
    attempts = [s for s in spans if s["name"] == "invoke_agent claudeq"]
    # Rate-limited on the only account; the next pass finds it cooling and defers; the next delivery succeeds.
    assert [a["attributes"]["claudeq.outcome"] for a in attempts] == ["rate_limited", "no_account", "success"]
    assert [a["parent"] for a in attempts] == [deliveries[0]["id"], deliveries[0]["id"], deliveries[1]["id"]]
    assert [a["attributes"].get("claudeq.account") for a in attempts] == ["a", None, "a"]
    assert attempts[2]["attributes"]["gen_ai.usage.input_tokens"] == 10
    assert [d["attributes"]["claudeq.status"] for d in deliveries] == ["deferred", "succeeded"]
    (terminal,) = [s for s in spans if s["name"] == "claudeq.terminal_write"]
    assert terminal["parent"] == deliveries[1]["id"] and terminal["attributes"]["claudeq.status"] == "succeeded"
    names = {s["name"] for s in spans}
    assert {"claudeq.account_slot", "claudeq.run"} <= names
    assert not any("hello" in json.dumps(s["attributes"]) for s in spans)  # the prompt is in no attribute


def test_tracing_configured_without_the_otel_extra_stays_off_and_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from importlib import metadata

    def missing(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setenv("CLAUDEQ_OTEL_ENABLED", "true")
    monkeypatch.setattr(metadata, "distribution", missing)
    tracing.enabled.cache_clear()
    try:
        assert tracing.enabled() is False
        assert "pip install 'claudeq[otel]'" in caplog.text
    finally:
        monkeypatch.undo()
        tracing.enabled.cache_clear()
    assert tracing.enabled() is False  # the environment of the suite: not configured


def test_a_traced_runs_cli_exports_its_spans_under_the_attempt_without_content_unless_opted_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tracing.cli_env(TRACEPARENT) == {}  # tracing off: nothing
    monkeypatch.setenv("CLAUDEQ_OTEL_ENABLED", "true")
    tracing.enabled.cache_clear()
    try:
        assert tracing.cli_env(None) == {}  # an untraced job
        env = tracing.cli_env(TRACEPARENT)
        assert env["TRACEPARENT"] == TRACEPARENT
        assert env["CLAUDE_CODE_ENABLE_TELEMETRY"] == env["CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"] == "1"
        assert env["OTEL_TRACES_EXPORTER"] == "otlp"
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
        assert env["OTEL_LOG_USER_PROMPTS"] == env["OTEL_LOG_TOOL_DETAILS"] == env["OTEL_LOG_RAW_API_BODIES"] == ""
        monkeypatch.setenv("CLAUDEQ_OTEL_LOG_CONTENT", "true")
        opted = tracing.cli_env(TRACEPARENT)
        assert opted["OTEL_LOG_USER_PROMPTS"] == opted["OTEL_LOG_TOOL_DETAILS"] == "1"
        assert opted["OTEL_LOG_RAW_API_BODIES"] == ""  # API bodies carry the whole conversation: never
        monkeypatch.setenv("CLAUDEQ_OTEL_CLI", "false")
        assert tracing.cli_env(TRACEPARENT) == {}
    finally:
        monkeypatch.undo()
        tracing.enabled.cache_clear()


def test_claudeq_status_shows_the_trace_id_of_a_traced_job(capsys: pytest.CaptureFixture[str]) -> None:
    from claudeq.producer.cli import _print_record

    traced = JobRecord(id="j1", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow(), traceparent=TRACEPARENT)
    _print_record(traced, as_json=False)
    assert "trace     0af7651916cd43dd8448eb211c80319c" in capsys.readouterr().out
    _print_record(traced, as_json=True)
    assert json.loads(capsys.readouterr().out)["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    _print_record(JobRecord(id="j2", spec=JobSpec(prompt="p"), status="queued", created_at=utcnow()), as_json=False)
    assert "trace" not in capsys.readouterr().out
