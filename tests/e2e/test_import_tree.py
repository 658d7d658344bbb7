"""A worker process started by the tests runs the code of this checkout (see tests/unit/test_import_tree.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.e2e.e2e_tools import WHERE_MODULES
from tests.support.tree import ROOT, under_root

pytestmark = pytest.mark.e2e


def test_worker_process_imports_claudeq_from_this_checkout(
    client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    policy = settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"})
    workers(policy=policy)
    job = client.submit(prompt="[[sim: tool mcp__claudeq__where {}]] where is your code?", mcp_tools=["where"])
    record = client.wait(job.id, timeout=90, poll_s=0.1)
    assert record.status == "succeeded", record.error
    results = [e for e in client.events(job.id) if e.type == "tool_result"]
    assert results and not results[0].data["is_error"], results
    text = str(results[0].data["text"])
    found = json.loads(text[text.index("where=") + len("where=") :])
    files: dict[str, str | None] = found["files"]
    assert all(files[name] for name in WHERE_MODULES), files
    elsewhere = {name: path for name, path in files.items() if not under_root(path)}
    assert not elsewhere, f"the worker imported from outside {ROOT}: {elsewhere}"
    # Every loaded claudeq module (dozens) came from this checkout's root, none from a copy or an installed package.
    assert found["modules"] > len(WHERE_MODULES), found
    assert [Path(r).resolve() for r in found["roots"]] == [ROOT], found["roots"]
