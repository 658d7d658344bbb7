"""`claudeq submit --wait` and `claudeq events --follow` stream the run as it happens.

The output is read line by line while the command runs: progress must arrive before the job ends.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.tree import ROOT, tree_env
from tests.support.worker_proc import settings_env

pytestmark = pytest.mark.e2e


@dataclass
class Reader:
    """Collects a stream's lines with the wall-clock time each one arrived."""

    lines: list[tuple[str, float]] = field(default_factory=list)

    def pump(self, stream: IO[str]) -> None:
        for text in stream:
            self.lines.append((text.rstrip("\n"), time.time()))


def run_cli(settings: Settings, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", *args],
        env=tree_env(**settings_env(settings)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def close_pipes(proc: subprocess.Popen[str]) -> None:
    """Close the pipes of an ended command (left open, they are unraisable ResourceWarnings at collection)."""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def test_submit_wait_streams_progress_while_the_job_runs_then_prints_the_answer(
    settings: Settings, workers: WorkerFactory, client: Client, unique: str
) -> None:
    workers()
    prompt = f'[[sim: text "streamed-{unique}"]] [[sim: stall 6]] take your time'
    proc = run_cli(settings, "submit", prompt, "--wait", "--timeout", "90")
    assert proc.stderr is not None and proc.stdout is not None
    reader = Reader()
    pump = threading.Thread(target=reader.pump, args=(proc.stderr,), daemon=True)
    pump.start()
    stdout = proc.stdout.read()
    assert proc.wait(90) == 0, (stdout, reader.lines)
    pump.join(10)
    close_pipes(proc)
    [job] = client.list()
    assert not isinstance(job, Exception) and job.finished_at is not None
    texts = [t for t, _ in reader.lines]
    running = [at for t, at in reader.lines if "running on account" in t]
    assert running, texts
    # The line arrived while the run was still stalled, seconds before the job finished (the job id is printed
    # only at the end, so arrival times are compared, not the job's status when a line came).
    assert running[0] < job.finished_at.timestamp() - 2, (running[0], job.finished_at, texts)
    assert any(t.endswith(" succeeded") for t in texts), texts
    assert f"assistant: streamed-{unique}" in " ".join(texts)
    assert "succeeded" in stdout and f"streamed-{unique}" in stdout


def test_events_follow_streams_and_a_queued_job_without_worker_says_so(
    settings: Settings, workers: WorkerFactory, client: Client, unique: str
) -> None:
    job = client.submit(prompt=f'[[sim: text "late-{unique}"]] nobody yet')
    proc = run_cli(settings, "events", job.id, "--follow")
    assert proc.stderr is not None and proc.stdout is not None
    reader = Reader()  # the notice on stderr, the progress on stdout: both collected
    pumps = [threading.Thread(target=reader.pump, args=(stream,), daemon=True) for stream in (proc.stdout, proc.stderr)]
    for pump in pumps:
        pump.start()
    deadline = time.monotonic() + 30
    while not any("no live worker" in t for t, _ in reader.lines):
        assert time.monotonic() < deadline, reader.lines
        assert proc.poll() is None
        time.sleep(0.1)
    workers()
    assert proc.wait(90) == 0, reader.lines
    for pump in pumps:  # the readers drain the pipes to their end
        pump.join(10)
    close_pipes(proc)
    texts = [t for t, _ in reader.lines]
    assert any("picked up by" in t for t in texts), texts
    assert any(t.endswith(" succeeded") for t in texts), texts
    assert client.get(job.id).status == "succeeded"
