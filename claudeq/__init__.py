"""claudeq: a job-queue worker fleet that runs Claude agent jobs in the background.

One import namespace over the repository's rooms (each a folder of its own, linked here):

- `claudeq` itself holds the contract both sides share: the job and account models (`claudeq.models`), Redis key
  shapes (`claudeq.keys`), the error tree (`claudeq.errors`), the job and account stores with the scripts both
  sides call, transcripts and conversations, and the permission policy.
- `claudeq.config`: settings, the account pool's configuration, Celery configuration.
- `claudeq.producer`: what a producer imports (`Client`, `AsyncClient`, validation) and its front ends (the CLI).
- `claudeq.worker`: what runs in the fleet (Celery app, engine, runner, loops, accounts, metrics, exporter).
- `claudeq.simulator`: a Messages-API model service the real CLI runs against.

What a producer needs is here at the top: `from claudeq import Client, AsyncClient, JobSpec, JobRecord` and the
error tree. The error tree is loaded with the package (it imports nothing); the client and the models when first
named, so `import claudeq` stays light. See docs/architecture.md#packaging.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from claudeq.errors import (
    BatchSpecError,
    ClaudeqError,
    ConfigError,
    JobNotFound,
    JobSpecError,
    JobTimeout,
    NotReplicated,
    PolicyViolation,
    RecordUnreadable,
    UnknownAccount,
)

if TYPE_CHECKING:
    from claudeq.models import JobRecord, JobSpec
    from claudeq.producer.client import AsyncClient, Client

__version__ = "0.1.0"

#: Names loaded when first asked for -> the module that defines them.
_LAZY: dict[str, str] = {
    "Client": "claudeq.producer.client",
    "AsyncClient": "claudeq.producer.client",
    "JobSpec": "claudeq.models",
    "JobRecord": "claudeq.models",
}

__all__ = [
    "AsyncClient",
    "BatchSpecError",
    "ClaudeqError",
    "Client",
    "ConfigError",
    "JobNotFound",
    "JobRecord",
    "JobSpec",
    "JobSpecError",
    "JobTimeout",
    "NotReplicated",
    "PolicyViolation",
    "RecordUnreadable",
    "UnknownAccount",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'claudeq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
