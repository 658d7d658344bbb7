"""The `claudeq` command line read through a pipe, about jobs real workers ran on the simulator: `status` says why a
job waits and prints a failure once, `events` keeps every character, `accounts` agrees with itself."""

from __future__ import annotations

import json
from typing import Any

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.e2e.test_accounts import configure, exhausted
from tests.integration.test_cli_output import cli
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount

pytestmark = pytest.mark.e2e


def test_a_deferred_job_says_why_in_status_events_and_accounts(
    client: Client, workers: WorkerFactory, settings: Settings, simulator: Any, accounts: list[SimAccount]
) -> None:
    configure(simulator, accounts, **{a.name: exhausted(600) for a in accounts})
    workers()
    job = client.submit(prompt="wait for a window")
    run_until(lambda: client.get(job.id).status == "deferred", 60, 0.2, what="the job deferred")
    [deferral] = [e for e in client.events(job.id) if e.type == "deferred"]
    reason = deferral.data["reason"]
    assert len(reason) > 60, reason  # longer than the cut it used to get

    shown = cli(settings, "status", job.id)
    assert shown.returncode == 0, shown.stderr
    assert f"  waiting   until {deferral.data['ready_at']}: {reason}" in shown.stdout.splitlines(), shown.stdout

    listed = cli(settings, "events", job.id)
    assert listed.returncode == 0, listed.stderr
    [line] = [line for line in listed.stdout.splitlines() if " waiting until " in line]
    assert line.endswith(f"({reason})") and "…" not in line, line

    table = cli(settings, "accounts")
    assert table.returncode == 0, table.stderr
    states, held, *_ = (block.splitlines() for block in table.stdout.split("\n\n"))
    assert held[0].split() == ["name", "held", "back"], table.stdout
    for name, (window, utilization) in ((h.split()[0], h.split(": ")[1].split()[:2]) for h in held[1:]):
        [row] = [line for line in states if line.startswith(f"{name} ")]
        assert row.endswith(f"{window} {utilization}"), table.stdout  # the utilization the reason gives


def test_status_prints_a_failed_jobs_error_once(client: Client, workers: WorkerFactory, settings: Settings) -> None:
    workers()
    job = client.submit(prompt="[[sim: error 400]] refused by the model service")
    record = client.wait(job.id, timeout=120)
    assert record.status == "failed" and record.error is not None and record.result and record.result.text
    assert record.result.text in record.error.message  # the run's last words are the error's own
    shown = cli(settings, "status", job.id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(record.result.text) == 1, shown.stdout


def test_transcript_prints_the_conversation_and_raw_the_entries(
    client: Client, workers: WorkerFactory, settings: Settings, unique: str
) -> None:
    workers(policy=settings.policy.model_copy(update={"mcp_tools_module": "tests.e2e.e2e_tools"}))
    prompt = '[[sim: tool mcp__claudeq__add {"a": 2, "b": 3}]] add two and three'
    job = client.submit(prompt=prompt, mcp_tools=["add"], conversation=unique)  # a conversation keeps its transcript
    record = client.wait(job.id, timeout=120)
    assert record.status == "succeeded" and record.result and record.result.text, record.error
    [(session_id, entries)] = client.transcript(job.id)
    [result] = [e.data["text"] for e in client.events(job.id) if e.type == "tool_result"]

    shown = cli(settings, "transcript", job.id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"session {session_id} ({len(entries)} entries)",
        f"user: {prompt}",
        'tool use mcp__claudeq__add {"a": 2, "b": 3}',
        f"tool result mcp__claudeq__add: {result}",
        f"assistant: {record.result.text}",
    ]

    raw = cli(settings, "transcript", job.id, "--raw")
    assert raw.returncode == 0, raw.stderr
    header, *lines = raw.stdout.splitlines()
    assert header == f"session {session_id} ({len(entries)} entries)"
    assert [json.loads(line) for line in lines] == entries  # every entry, the CLI's bookkeeping too
