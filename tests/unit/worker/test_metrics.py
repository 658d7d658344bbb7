"""WorkerMetrics: samples on a private registry, bounded labels, thread safety, the /metrics HTTP server."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from claudeq.errors import ConfigError
from claudeq.models import Usage
from claudeq.worker.metrics.labels import canonical_model, model_label, primary_model, token_label, tool_label
from claudeq.worker.metrics.prometheus import WorkerMetrics
from claudeq.worker.run.outcome import RateLimitSignal
from claudeq.worker.run.prices import PRICES


@pytest.fixture
def metrics() -> WorkerMetrics:
    return WorkerMetrics(CollectorRegistry())


def value(m: WorkerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_two_instances_have_separate_registries() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.job_finished("q", "succeeded")
    assert value(first, "claudeq_jobs_finished_total", queue="q", status="succeeded") == 1
    assert value(second, "claudeq_jobs_finished_total", queue="q", status="succeeded") is None


def test_usage_counts_tokens_per_type_and_cost_per_canonical_model(metrics: WorkerMetrics) -> None:
    usage = Usage(
        model_usage={
            "claude-sonnet-5-5": {
                "inputTokens": 12,
                "outputTokens": 5,
                "cacheReadInputTokens": 100,
                "cacheCreationInputTokens": 7,
                "costUSD": 0.000074,
                "canonicalModel": "claude-sonnet-5-5",
            },
            # an alias key that the CLI maps to a canonical id
            "opus": {"inputTokens": 3, "outputTokens": 1, "costUSD": 0.5, "canonicalModel": "claude-opus-5-5"},
        }
    )
    metrics.usage("acct-a", usage)
    metrics.usage("acct-a", usage)
    tokens = "claudeq_tokens_total"
    assert value(metrics, tokens, account="acct-a", model="claude-sonnet-5-5", type="input") == 24
    assert value(metrics, tokens, account="acct-a", model="claude-sonnet-5-5", type="output") == 10
    assert value(metrics, tokens, account="acct-a", model="claude-sonnet-5-5", type="cacheRead") == 200
    assert value(metrics, tokens, account="acct-a", model="claude-sonnet-5-5", type="cacheCreation") == 14
    assert value(metrics, tokens, account="acct-a", model="claude-opus-5-5", type="input") == 6
    assert value(metrics, tokens, account="acct-a", model="claude-opus-5-5", type="cacheRead") == 0
    assert value(metrics, tokens, account="acct-a", model="opus", type="input") is None
    cost = value(metrics, "claudeq_cost_usd_total", account="acct-a", model="claude-sonnet-5-5")
    assert cost == pytest.approx(2 * 0.000074)
    assert value(metrics, "claudeq_cost_usd_total", account="acct-a", model="claude-opus-5-5") == pytest.approx(1.0)


def test_usage_without_model_usage_counts_totals_as_other(metrics: WorkerMetrics) -> None:
    metrics.usage("a", Usage(input_tokens=40, output_tokens=2, cost_usd=0.01))
    assert value(metrics, "claudeq_tokens_total", account="a", model="other", type="input") == 40
    assert value(metrics, "claudeq_cost_usd_total", account="a", model="other") == pytest.approx(0.01)


def test_usage_ignores_negative_and_non_numeric_fields(metrics: WorkerMetrics) -> None:
    bad = {"inputTokens": -5, "outputTokens": "many", "costUSD": True}
    metrics.usage("a", Usage(model_usage={"claude-haiku-5-5": bad}))
    assert value(metrics, "claudeq_tokens_total", account="a", model="claude-haiku-5-5", type="input") == 0
    assert value(metrics, "claudeq_tokens_total", account="a", model="claude-haiku-5-5", type="output") == 0
    assert value(metrics, "claudeq_cost_usd_total", account="a", model="claude-haiku-5-5") == 0


def test_job_attempt_retry_tool_and_mirror_counters(metrics: WorkerMetrics) -> None:
    metrics.job_finished("claudeq.runs", "failed")
    metrics.attempt("a", "transient_error")
    metrics.attempt("a", "transient_error")
    metrics.retry("server_error")
    metrics.tool_call("mcp__calc__add")  # not registered: other
    metrics.tool_call("Read")
    metrics.tool_call("rm -rf /")
    metrics.mirror_error()
    assert value(metrics, "claudeq_jobs_finished_total", queue="claudeq.runs", status="failed") == 1
    assert value(metrics, "claudeq_attempts_total", account="a", outcome="transient_error") == 2
    assert value(metrics, "claudeq_retries_total", reason="server_error") == 1
    assert value(metrics, "claudeq_tool_calls_total", tool="mcp__calc__add") is None
    assert value(metrics, "claudeq_tool_calls_total", tool="Read") == 1
    assert value(metrics, "claudeq_tool_calls_total", tool="other") == 2
    assert value(metrics, "claudeq_session_mirror_errors_total") == 1


def test_passthrough_refusals_are_counted_by_bounded_method_and_reason(metrics: WorkerMetrics) -> None:
    metrics.passthrough_refusal("POST", "path")
    metrics.passthrough_refusal("POST", "path")
    metrics.passthrough_refusal("BREW /v1/sk-ant-secret", "/api/oauth/claude_cli/create_api_key")
    assert value(metrics, "claudeq_passthrough_refused_total", method="POST", reason="path") == 2
    assert value(metrics, "claudeq_passthrough_refused_total", method="other", reason="other") == 1
    series = {
        tuple(sorted(sample.labels.items()))
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "claudeq_passthrough_refused_total"
    }
    assert series == {(("method", "POST"), ("reason", "path")), (("method", "other"), ("reason", "other"))}


def test_rate_limit_event_counts_and_sets_utilization(metrics: WorkerMetrics) -> None:
    metrics.rate_limit_event("a", RateLimitSignal("allowed_warning", window="five_hour", utilization=0.91))
    metrics.rate_limit_event("a", RateLimitSignal("rejected", window="five_hour"))
    metrics.rate_limit_event("a", RateLimitSignal("weird", window=None))
    events = "claudeq_rate_limit_events_total"
    assert value(metrics, events, account="a", status="allowed_warning", window="five_hour") == 1
    assert value(metrics, events, account="a", status="rejected", window="five_hour") == 1
    assert value(metrics, events, account="a", status="other", window="unknown") == 1
    # a signal without utilization leaves the last known value
    assert value(metrics, "claudeq_account_utilization_ratio", account="a", window="five_hour") == pytest.approx(0.91)


def test_durations_and_in_progress(metrics: WorkerMetrics) -> None:
    metrics.run_started("a")
    metrics.run_started("a")
    metrics.run_ended("a")
    metrics.run_duration("a", "claude-sonnet-5-5", 42.0)
    metrics.run_duration("a", "sonnet", 7200.0)
    metrics.queue_wait(0.3)
    metrics.queue_wait(-1.0)  # clock skew between hosts: counted as 0, never raises
    assert value(metrics, "claudeq_runs_in_progress", account="a") == 1
    duration = "claudeq_run_duration_seconds_bucket"
    assert value(metrics, duration, account="a", model="claude-sonnet-5-5", le="60.0") == 1
    assert value(metrics, duration, account="a", model="claude-sonnet-5-5", le="7200.0") == 2  # `sonnet`: alias
    assert value(metrics, "claudeq_queue_wait_seconds_count") == 2
    assert value(metrics, "claudeq_queue_wait_seconds_bucket", le="0.05") == 1


def test_methods_never_raise(metrics: WorkerMetrics) -> None:
    metrics.usage("a", None)  # type: ignore[arg-type]
    metrics.rate_limit_event("a", None)  # type: ignore[arg-type]
    metrics.run_duration("a", "claude-x", "slow")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("claude-sonnet-5-5", "claude-sonnet-5-5"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),  # the pricing table's canonical id
        ("sonnet", "claude-sonnet-5-5"),  # an alias, resolved as the CLI does
        ("claude-opus-4-1", "claude-opus-5-5"),
        ("Claude-Sonnet", "other"),
        ("claude-" + "x" * 100, "other"),
        ("claude-sonnet-5-5[1m]", "other"),
        ("claude-made-up-7", "other"),  # looks like a model id, but no model the fleet knows
        (None, "other"),
    ],
)
def test_model_label_is_bounded(raw: str | None, label: str) -> None:
    assert model_label(raw) == label


def test_model_labels_from_specs_and_runs_stay_within_the_known_models(metrics: WorkerMetrics) -> None:
    """A spec's `model` is a label when the run reports no usage, and modelUsage keys come from the CLI: a thousand
    invented ids must not make a thousand series."""
    for i in range(1000):
        metrics.run_duration("a", f"claude-invented-{i}", 1.0)
        metrics.usage("a", Usage(model_usage={f"claude-invented-{i}": {"outputTokens": 1, "costUSD": 0.001}}))
    models = {s.labels["model"] for family in metrics.registry.collect() for s in family.samples if "model" in s.labels}
    assert models == {"other"}
    assert models <= set(PRICES) | {"other"}


def test_canonical_model_prefers_the_cli_canonical_id() -> None:
    assert canonical_model("claude-opus-4-1", {"canonicalModel": "claude-opus-5-5"}) == "claude-opus-5-5"
    assert canonical_model("claude-sonnet-4-5", {}) == "claude-sonnet-4-5"
    assert canonical_model("claude-opus-4-1", {}) == "claude-opus-5-5"  # the alias the pricing table resolves
    assert canonical_model("fable", {"canonicalModel": 3}) == "claude-fable-5-2"  # not a string: the id, resolved
    assert canonical_model("gpt-4", {"canonicalModel": 3}) == "other"


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("Bash", "Bash"),
        ("StructuredOutput", "StructuredOutput"),
        ("mcp__claudeq__add", "other"),  # not registered on this worker
        ("mcp__calc__add", "other"),
        ("mcp__calc", "other"),
        ("mcp__a b__c", "other"),
        ("Frobnicate", "other"),
        ("", "other"),
    ],
)
def test_tool_label_is_bounded(raw: str, label: str) -> None:
    assert tool_label(raw) == label


def test_tool_labels_are_the_builtin_and_the_registered_tools(metrics: WorkerMetrics) -> None:
    registered = WorkerMetrics(CollectorRegistry(), mcp_tools=["mcp__claudeq__add"])
    for i in range(500):  # tool names a model invents
        registered.tool_call(f"mcp__claudeq__invented_{i}")
        registered.tool_call(f"mcp__evil{i}__x")
        registered.tool_call(f"Tool{i}")
    registered.tool_call("mcp__claudeq__add")
    registered.tool_call("Read")
    tools = {s.labels["tool"]: s.value for s in registered.tool_calls.collect()[0].samples if s.name.endswith("_total")}
    assert tools == {"other": 1500, "mcp__claudeq__add": 1, "Read": 1}


def test_free_form_labels_are_bounded() -> None:
    assert token_label("acct-1") == "acct-1"
    assert token_label("") == "unknown"
    assert token_label("has space") == "other"
    assert token_label("x" * 65) == "other"


def test_concurrent_updates_are_not_lost(metrics: WorkerMetrics) -> None:
    usage = Usage(model_usage={"claude-haiku-5-5": {"inputTokens": 1, "costUSD": 0.25}})

    def work() -> None:
        for _ in range(500):
            metrics.usage("a", usage)
            metrics.run_started("a")
            metrics.run_ended("a")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert value(metrics, "claudeq_tokens_total", account="a", model="claude-haiku-5-5", type="input") == 4000
    assert value(metrics, "claudeq_cost_usd_total", account="a", model="claude-haiku-5-5") == 1000
    assert value(metrics, "claudeq_runs_in_progress", account="a") == 0


def test_serve_on_port_zero_returns_a_port_serving_this_registry(metrics: WorkerMetrics) -> None:
    metrics.job_finished("q", "succeeded")
    port = metrics.serve(0, addr="127.0.0.1")
    try:
        assert port > 0
        assert metrics.serve(0, addr="127.0.0.1") == port  # idempotent
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }
        assert samples[("claudeq_jobs_finished_total", (("queue", "q"), ("status", "succeeded")))] == 1
    finally:
        metrics.close()


def test_serve_on_a_taken_port_is_a_config_error(metrics: WorkerMetrics) -> None:
    other = WorkerMetrics(CollectorRegistry())
    port = other.serve(0, addr="127.0.0.1")
    try:
        with pytest.raises(ConfigError) as info:
            metrics.serve(port, addr="127.0.0.1")
        assert info.value.field == "CLAUDEQ_METRICS_PORT"
    finally:
        other.close()


def test_primary_model_is_the_canonical_model_with_most_output() -> None:
    usage = Usage(
        model_usage={
            "claude-haiku-5-5": {"outputTokens": 3},
            "opus": {"outputTokens": 40, "canonicalModel": "claude-opus-5-5"},
        }
    )
    assert primary_model(usage) == "claude-opus-5-5"
    assert primary_model(Usage()) is None
    assert primary_model(None) is None
