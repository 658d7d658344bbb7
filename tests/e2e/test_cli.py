"""The `claudeq` command line against real workers: `events ID --follow` follows a job to its end, and
`submit --wait` exits 3 when the job finishes without success."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.tree import ROOT
from tests.support.worker_proc import worker_env

pytestmark = pytest.mark.e2e


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "claudeq.producer.cli", *args]


def test_events_follow_streams_until_the_job_ends(client: Client, workers: WorkerFactory, settings: Settings) -> None:
    job = client.submit(prompt="[[sim: text followed]] follow me")
    follow = subprocess.Popen(
        cli_command("events", job.id, "--follow", "--json"),
        env=worker_env(settings, []),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        first = json.loads(follow.stdout.readline())
        assert first["type"] == "submitted"
        assert follow.poll() is None, "--follow returned while the job was still queued"  # no worker yet
        workers()
        rest, stderr = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == 0, stderr
    events = [first, *(json.loads(line) for line in rest.splitlines())]
    types = [e["type"] for e in events]
    assert types[-1] == "succeeded", types
    assert {"claimed", "run_started", "result"} <= set(types)
    assert types == [e.type for e in client.events(job.id)]  # everything, once, in order


def test_submit_wait_exits_3_when_the_job_fails(workers: WorkerFactory, settings: Settings) -> None:
    workers()
    done = subprocess.run(
        cli_command("submit", "[[sim: error 400]] refused by the model service", "--wait", "--json"),
        env=worker_env(settings, []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "failed" and record["error"]["kind"], record
