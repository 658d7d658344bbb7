"""The bounded label values of the worker's metrics (docs/metrics.md), pure: no Prometheus client.

Every label value a metric gets passes through one of these, so a spec, a run or a model can never add a series
the dashboards do not know. The in-process worker of `claudeq.testing` and the handler use them without the
Prometheus client installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from claudeq.models import Usage

from ..run.prices import PRICES, canonical_id

OTHER = "other"
UNKNOWN = "unknown"


#: Token types as Claude Code's own telemetry names them, with the SDK `modelUsage` key each one is read from.
TOKEN_TYPES: dict[str, str] = {
    "input": "inputTokens",
    "output": "outputTokens",
    "cacheRead": "cacheReadInputTokens",
    "cacheCreation": "cacheCreationInputTokens",
}

#: Built-in tools of the Claude Code CLI, kept as their own label values; anything else unknown becomes `other`.
BUILTIN_TOOLS: frozenset[str] = frozenset(
    {
        "Agent",
        "Bash",
        "BashOutput",
        "Edit",
        "ExitPlanMode",
        "Glob",
        "Grep",
        "KillBash",
        "KillShell",
        "LS",
        "ListMcpResources",
        "MultiEdit",
        "NotebookEdit",
        "NotebookRead",
        "Read",
        "ReadMcpResource",
        "Skill",
        "SlashCommand",
        "StructuredOutput",
        "Task",
        "TodoWrite",
        "WebFetch",
        "WebSearch",
        "Write",
    }
)

_TOKEN_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
RATE_LIMIT_STATUSES = frozenset({"allowed", "allowed_warning", "rejected"})
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REFUSAL_REASONS = frozenset({"path", "method", "query"})

#: The models a `model` label may name: the canonical ids the pricing table knows (worker/run/prices.py).
KNOWN_MODELS: frozenset[str] = frozenset(PRICES)


def model_label(model: str | None) -> str:
    """A bounded model label: the canonical id of a model the pricing table knows (a date suffix dropped, an alias
    resolved, as `price_of` does), else `other`. Bounded by `KNOWN_MODELS`, whatever a spec or a run reports."""
    if not model:
        return OTHER
    name = canonical_id(model)
    return name if name in KNOWN_MODELS else OTHER


def tool_label(tool: str | None, known: Iterable[str] = BUILTIN_TOOLS) -> str:
    """A bounded tool label: a name in `known` (the built-in tools, plus the worker's registered MCP tools by their
    `mcp__claudeq__<tool>` names), else `other`. A tool name the model invents is never a label value."""
    if tool and tool in known:
        return tool
    return OTHER


def token_label(value: str | None, default: str = UNKNOWN) -> str:
    """A bounded free-form label (account, queue, reason, window): short and plain, else `other`."""
    if not value:
        return default
    return value if _TOKEN_RE.fullmatch(value) else OTHER


def canonical_model(model_id: str, entry: dict[str, Any]) -> str:
    """The label of one `modelUsage` entry: its `canonicalModel` when the CLI gives one, else the id it is keyed by."""
    canonical = entry.get("canonicalModel")
    return model_label(canonical if isinstance(canonical, str) and canonical else model_id)


def primary_model(usage: Usage | None) -> str | None:
    """The canonical id of the model with the most output tokens in `usage` (for run_duration), None if none."""
    if usage is None or not usage.model_usage:
        return None
    model_id, entry = max(usage.model_usage.items(), key=lambda item: counter_value(item[1].get("outputTokens")))
    label = canonical_model(model_id, entry)
    return None if label == OTHER else label


def counter_value(value: Any) -> float:
    """A non-negative number from a usage field (anything else counts as 0: counters only go up)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if value > 0 else 0.0
