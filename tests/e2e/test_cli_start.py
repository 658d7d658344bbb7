"""End to end, real workers, the real CLI and the simulator: a system prompt over the 128 KiB an argv argument
holds runs in one attempt, and a CLI that cannot start for good fails the job at once, not retryable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e

BIG = 200 * 1024


def test_a_big_system_prompt_succeeds_in_one_attempt(client: Client, workers: WorkerFactory, simulator: Any) -> None:
    workers()
    job = client.submit(prompt='[[sim: text "done"]] go', system_prompt="Be exact. " + "x" * BIG, max_attempts=3)
    record = client.wait(job.id, timeout=120, poll_s=0.1)
    assert record.status == "succeeded", record.error
    assert [a.outcome for a in record.attempts] == ["success"]
    main = [r for r in simulator.requests() if r["session_id"] == record.session_id and r["kind"] == "main"]
    assert main and main[0]["system_text_len"] >= BIG


def test_a_cli_that_cannot_start_fails_once_and_not_retryable(
    client: Client, workers: WorkerFactory, tmp_path: Path
) -> None:
    broken = tmp_path / "claude"
    broken.write_text("#!/nonexistent/interpreter\n")  # exists and is executable, but its exec fails (ENOENT)
    broken.chmod(0o755)
    workers(cli_path=broken)
    job = client.submit(prompt="hi", max_attempts=3)
    record = client.wait(job.id, timeout=120, poll_s=0.1)
    assert record.status == "failed"
    assert [a.outcome for a in record.attempts] == ["failed"], [(a.outcome, a.detail) for a in record.attempts]
    assert record.error is not None and record.error.kind == "configuration" and not record.error.retryable
    assert "could not start" in record.error.message
